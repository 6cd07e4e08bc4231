"""On-call approvers (SPEC §16): who is on call now, as Slack users (roster), and whether a
click is an eligible on-call approver's, with the rule's fallback (gate)."""

from bot.core.oncall.gate import OnCallGate, OnCallNow, Verdict, level_now, on_call_words
from bot.core.oncall.roster import (
    DirectoryError,
    EmailDirectory,
    OnCallClients,
    OnCallMember,
    OnCallRoster,
)

__all__ = [
    "DirectoryError",
    "EmailDirectory",
    "OnCallClients",
    "OnCallGate",
    "OnCallMember",
    "OnCallNow",
    "OnCallRoster",
    "Verdict",
    "level_now",
    "on_call_words",
]
