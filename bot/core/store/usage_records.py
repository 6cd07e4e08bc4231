"""The usage ledger's tables and records (SPEC §13; the UsageStore in bot.core.store.usage
writes them): a cursor per watched cluster, and what each 15-minute bucket of its time
cost. Amounts are whole micro-units of the price's currency and times whole milliseconds,
so sums are exact on SQLite and PostgreSQL alike."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, PrimaryKeyConstraint, Table
from sqlalchemy import Text as TextType

from bot.core.store.migrations import UTCDateTime

BUCKET = timedelta(minutes=15)  # every time zone's offset is a multiple of it
MICROS = Decimal(1_000_000)
MS_PER_HOUR = 3_600_000

_metadata = MetaData()

usage_cursors = Table(
    "gpuops_usage_cursors",
    _metadata,
    Column("project", TextType(), nullable=False),
    Column("cluster_id", TextType(), nullable=False),
    Column("provider", TextType(), nullable=False),
    Column("cluster_name", TextType(), nullable=False),
    Column("since", UTCDateTime(), nullable=False),  # first seen
    Column("until", UTCDateTime(), nullable=False),  # accrued up to; the compare-and-set token
    # What it was at ``until`` (what the next interval accrues at).
    Column("gpus", Integer()),
    Column("nodes", Integer()),
    Column("gpu_type", TextType()),
    Column("rate_micros", BigInteger()),  # the whole cluster's price per hour
    Column("currency", TextType()),
    Column("price_as_of", TextType()),
    PrimaryKeyConstraint("project", "cluster_id", name="pk_gpuops_usage_cursors"),
)

usage = Table(
    "gpuops_usage",
    _metadata,
    Column("project", TextType(), nullable=False),
    Column("cluster_id", TextType(), nullable=False),
    Column("bucket_start", UTCDateTime(), nullable=False),
    Column("cluster_name", TextType(), nullable=False),
    Column("currency", TextType()),
    Column("covered_ms", BigInteger(), nullable=False),
    Column("gpu_ms", BigInteger(), nullable=False),
    Column("cost_micros", BigInteger(), nullable=False),
    Column("unpriced_ms", BigInteger(), nullable=False),  # time at no known price
    Column("estimated_ms", BigInteger(), nullable=False),  # time in a polling gap
    Column("estimated_cost_micros", BigInteger(), nullable=False),
    PrimaryKeyConstraint("project", "cluster_id", "bucket_start", name="pk_gpuops_usage"),
    Index("ix_gpuops_usage_project_bucket", "project", "bucket_start"),
)


def to_micros(amount: Decimal) -> int:
    return int((amount * MICROS).to_integral_value(rounding=ROUND_HALF_EVEN))


def from_micros(micros: int) -> Decimal:
    return Decimal(micros) / MICROS


def cost_micros(rate_micros: int, ms: int) -> int:
    """What ``ms`` milliseconds cost at ``rate_micros`` per hour, rounded half up."""
    return (rate_micros * ms + MS_PER_HOUR // 2) // MS_PER_HOUR


class Observation(BaseModel):
    """One watched cluster as a poll (or a change's result) saw it, priced by the price
    table or plan in force then (``rate`` None: no known price)."""

    model_config = ConfigDict(frozen=True)

    project: str
    cluster_id: str
    provider: str
    cluster_name: str
    gpus: int | None = None
    nodes: int | None = None
    gpu_type: str | None = None
    rate: Decimal | None = None  # the whole cluster, per hour
    currency: str | None = None
    price_as_of: str | None = None


class UsageCursor(BaseModel):
    """How far a cluster is accrued, and at what it stood then."""

    model_config = ConfigDict(frozen=True)

    project: str
    cluster_id: str
    provider: str
    cluster_name: str
    since: datetime
    until: datetime
    gpus: int | None
    nodes: int | None
    gpu_type: str | None
    rate_micros: int | None
    currency: str | None
    price_as_of: str | None


class UsageSum(BaseModel):
    """Summed usage of one group (a cluster, a bucket), in whole units."""

    model_config = ConfigDict(frozen=True)

    project: str = ""
    cluster_id: str = ""
    cluster_name: str = ""
    bucket_start: datetime | None = None
    currency: str | None = None
    covered_ms: int = 0
    gpu_ms: int = 0
    cost_micros: int = 0
    unpriced_ms: int = 0
    estimated_ms: int = 0
    estimated_cost_micros: int = 0

    @property
    def cost(self) -> Decimal:
        return from_micros(self.cost_micros)

    @property
    def estimated_cost(self) -> Decimal:
        return from_micros(self.estimated_cost_micros)

    @property
    def gpu_hours(self) -> Decimal:
        return Decimal(self.gpu_ms) / MS_PER_HOUR
