"""The watcher's tables and records: alert keys, posted remediations and their
decisions, the watcher's memory (the WatchStore in bot.core.store.watch writes them)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

from bot.core.store.migrations import UTCDateTime, json_type

REMEDIATION_ID_PREFIX = "RM-"  # gpuops's own id of a posted remediation, e.g. RM-7K2M9Q


class RemediationDecision(enum.StrEnum):
    """Where gpuops's handling of one posted remediation stands."""

    AWAITING = "awaiting"  # posted with its buttons
    DECIDING = "deciding"  # a click won; its approve/reject call is being sent
    APPROVED = "approved"
    REJECTED = "rejected"
    ALREADY_DECIDED = "already_decided"  # Together said someone decided first
    UNKNOWN = "unknown"  # the call may or may not have been applied; the poll will tell
    ELSEWHERE = "elsewhere"  # left PENDING_APPROVAL outside gpuops (console, auto, cancelled)


_metadata = MetaData()

alerts = Table(
    "gpuops_watch_alerts",
    _metadata,
    Column("key", Text(), primary_key=True),
    Column("channel", Text(), nullable=False),
    Column("ts", Text()),
    # When it was claimed (or taken over): the claim's token for the writes after the post.
    Column("posted_at", UTCDateTime(), nullable=False),
)

remediations = Table(
    "gpuops_remediations",
    _metadata,
    Column("id", String(16), primary_key=True),
    Column("project", Text(), nullable=False),
    Column("cluster_id", Text(), nullable=False),
    Column("cluster_name", Text(), nullable=False),
    Column("instance_id", Text(), nullable=False),
    Column("remediation_id", Text(), nullable=False),
    Column("node", Text(), nullable=False),
    Column("channel", Text(), nullable=False),
    Column("ts", Text()),
    Column("decision", String(16), nullable=False),
    Column("provider_state", Text(), nullable=False),
    Column("decided_by", Text()),
    Column("comment", Text()),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("version", Integer(), nullable=False),
)

memory = Table(
    "gpuops_watch_memory",
    _metadata,
    Column("name", Text(), primary_key=True),
    Column("data", json_type(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
)


@dataclass(frozen=True)
class AlertClaim:
    """The right to post one alert key, as this caller holds it."""

    key: str
    at: datetime  # its posted_at: a later takeover changes it, and this claim's writes fail


class Held(enum.Enum):
    """Why a key could not be claimed."""

    POSTED = "posted"  # its message is out (or it was deliberately skipped)
    PENDING = "pending"  # claimed recently and not posted yet: a post may be under way


class NewRemediationRecord(BaseModel):
    """What the watcher knows of a remediation when it first posts it."""

    project: str
    cluster_id: str
    cluster_name: str
    instance_id: str
    remediation_id: str
    node: str
    channel: str
    provider_state: str


class RemediationRecord(NewRemediationRecord):
    """A remediation as stored: what was first known of it, and how it was decided."""

    model_config = ConfigDict(frozen=True)

    id: str
    ts: str | None
    decision: RemediationDecision
    decided_by: str | None
    comment: str | None
    created_at: datetime
    updated_at: datetime
    version: int
