"""Which failures make the store "unavailable", and how the database is named in messages."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import exc as sa_exc

from bot.core.store import StoreUnavailable, normalize_database_url
from bot.core.store.errors import describe_database, is_unavailable, unavailable_from


class _PgError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"server said {sqlstate}")
        self.sqlstate = sqlstate


def _wrapped(cause: BaseException) -> sa_exc.DBAPIError:
    try:
        raise cause
    except BaseException as inner:
        error = sa_exc.OperationalError("SELECT 1", None, inner)
        error.__cause__ = inner
        return error


@pytest.mark.parametrize(
    "cause",
    [
        ConnectionRefusedError(111, "Connect call failed"),
        ConnectionResetError(104, "reset"),
        TimeoutError(),
        _PgError("08006"),  # connection failure
        _PgError("57P01"),  # admin shutdown
        _PgError("57P03"),  # cannot connect now (starting up)
        _PgError("53300"),  # too many connections
        _PgError("25006"),  # read-only transaction
        sqlite3.OperationalError("attempt to write a readonly database"),
        sqlite3.OperationalError("unable to open database file"),
        sqlite3.OperationalError("database is locked"),
    ],
)
def test_unavailable_causes(cause: BaseException) -> None:
    assert is_unavailable(_wrapped(cause))


@pytest.mark.parametrize(
    "cause",
    [
        _PgError("23505"),  # unique violation: a question for the caller, not an outage
        _PgError("42P01"),  # undefined table
        sqlite3.OperationalError("no such table: gpuops_leases"),
        ValueError("bad argument"),
    ],
)
def test_errors_in_what_was_asked_are_not_unavailable(cause: BaseException) -> None:
    assert not is_unavailable(_wrapped(cause))


def test_read_only_is_flagged_and_said() -> None:
    error = unavailable_from(_wrapped(_PgError("25006")), "postgresql://u@h:5432/d")
    assert error.read_only and "it is read-only" in str(error)
    refused = unavailable_from(_wrapped(ConnectionRefusedError(111, "refused")), "sqlite:///x")
    assert not refused.read_only
    assert (
        str(refused)
        == "the state store sqlite:///x is unavailable: ConnectionRefusedError: [Errno 111] refused"
    )


def test_a_timeout_says_how_long_was_waited() -> None:
    error = unavailable_from(_wrapped(TimeoutError()), "db", timeout=2.5)
    assert isinstance(error, StoreUnavailable) and str(error).endswith("no answer within 2.5 s")


@pytest.mark.parametrize(
    ("url", "described"),
    [
        (
            "postgresql://gpuops:s3cret@db.internal:6432/ops",
            "postgresql://gpuops@db.internal:6432/ops",
        ),
        ("postgres://db/ops", "postgresql://db/ops"),
        ("sqlite:///var/lib/gpuops.db", "sqlite:///var/lib/gpuops.db"),
        ("sqlite://", "sqlite:///:memory:"),
    ],
)
def test_the_database_is_named_without_its_password(url: str, described: str) -> None:
    assert describe_database(normalize_database_url(url)) == described
