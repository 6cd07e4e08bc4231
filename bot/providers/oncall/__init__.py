"""Clients of the on-call tools whose schedules may decide who approves (SPEC §16):
PagerDuty and Opsgenie, their documented answers (models) and the reads (client)."""

from bot.providers.oncall.client import (
    DEFAULT_DEADLINE,
    OPSGENIE_URL,
    PAGERDUTY_URL,
    OnCallClient,
    OnCallUnavailable,
    OpsgenieClient,
    PagerDutyClient,
)
from bot.providers.oncall.models import SOURCE_TITLES, OnCallPerson, Source

__all__ = [
    "DEFAULT_DEADLINE",
    "OPSGENIE_URL",
    "PAGERDUTY_URL",
    "SOURCE_TITLES",
    "OnCallClient",
    "OnCallPerson",
    "OnCallUnavailable",
    "OpsgenieClient",
    "PagerDutyClient",
    "Source",
]
