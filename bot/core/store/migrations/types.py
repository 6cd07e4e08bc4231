"""The column types the migrations (and the store's tables) use, and what a migration is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Connection,
    DateTime,
    Dialect,
    Integer,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator, TypeEngine


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that goes in and comes out as a tz-aware UTC datetime on every backend.

    PostgreSQL stores ``timestamptz``. SQLite has no time zones, so the value is stored as
    naive UTC text in a fixed format (which also keeps text comparison chronological).
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()} given; use a tz-aware one")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def json_type() -> JSON:
    """JSON column type: JSONB on PostgreSQL, JSON text elsewhere."""
    return JSON().with_variant(JSONB(), "postgresql")


def autoincrement_id_type() -> TypeEngine[int]:
    """BIGINT identity on PostgreSQL; SQLite only auto-increments an INTEGER primary key."""
    return BigInteger().with_variant(Integer(), "sqlite")


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]
    # How much longer than an ordinary open the migration may take (rewriting rows).
    extra_seconds: float = 0.0
