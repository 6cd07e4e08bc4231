"""``StoreUnavailable``: the state store cannot be reached or written, and nothing was changed."""

from __future__ import annotations

import sqlite3

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL

from bot.errors import GpuopsError

# SQLSTATE classes that mean the database is not there for us right now: connection
# exceptions, insufficient resources, operator intervention (shutdown, starting up).
_UNAVAILABLE_SQLSTATE_PREFIXES = ("08", "53", "57P")
_READ_ONLY_SQLSTATE = "25006"  # read_only_sql_transaction: a standby, or a read-only database
# No such database (invalid_catalog_name), no such role or a refused password
# (invalid_authorization_specification, invalid_password): not usable, said in one line.
_NO_SUCH_DATABASE_SQLSTATE = "3D000"  # invalid_catalog_name
_NOT_USABLE_SQLSTATES = (_NO_SUCH_DATABASE_SQLSTATE, "28000", "28P01")
_SQLITE_UNAVAILABLE_MARKERS = (
    "readonly database",
    "unable to open database",
    "disk i/o error",
    "database is locked",
    "database or disk is full",
)


class StoreUnavailable(GpuopsError):
    """The state store is unreachable, too slow or read-only. The operation did not happen
    (or, for a commit cut off midway, may not have: callers treat it as not done and let
    the compare-and-set of a retry decide). Its text names the database, never a password."""

    def __init__(self, database: str, reason: str, *, read_only: bool = False) -> None:
        self.database = database
        self.reason = reason
        self.read_only = read_only
        super().__init__(f"the state store {database} is unavailable: {reason}")


class StoreNotReady(GpuopsError):
    """A database opened only to read (``Store.open_read_only``) is missing, holds no gpuops
    schema, or an older one than this release's. Nothing was created or migrated. Its text
    names the database, never a password."""

    def __init__(self, database: str, reason: str) -> None:
        self.database = database
        self.reason = reason
        super().__init__(f"the state store {database} {reason}")


def describe_database(url: URL) -> str:
    """``postgresql://user@host:5432/db`` or ``sqlite:///path``: no password, no driver."""
    if url.get_backend_name() == "sqlite":
        return f"sqlite:///{url.database or ':memory:'}"
    port = f":{url.port}" if url.port is not None else ""
    user = f"{url.username}@" if url.username else ""
    return f"postgresql://{user}{url.host or ''}{port}/{url.database or ''}"


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def is_read_only(error: BaseException) -> bool:
    """True when ``error`` (or what caused it) says the database refuses writes."""
    for cause in _chain(error):
        if getattr(cause, "sqlstate", None) == _READ_ONLY_SQLSTATE:
            return True
        if isinstance(cause, sqlite3.OperationalError) and "readonly" in str(cause).lower():
            return True
    return False


def is_missing_database(error: BaseException) -> bool:
    """True when ``error`` (or what caused it) says the SQLite file or the PostgreSQL
    database does not exist, rather than that it cannot be reached."""
    for cause in _chain(error):
        if getattr(cause, "sqlstate", None) == _NO_SUCH_DATABASE_SQLSTATE:
            return True
        if isinstance(cause, sqlite3.OperationalError) and "unable to open" in str(cause):
            return True
    return False


def is_unavailable(error: BaseException) -> bool:
    """True for connection refused/reset/lost, timeouts, a full pool, a read-only or
    unopenable database; False for errors in what was asked (constraint, syntax …)."""
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return True
    for cause in _chain(error):
        if isinstance(cause, OSError | TimeoutError | sa_exc.TimeoutError):
            return True
        sqlstate = getattr(cause, "sqlstate", None)
        if isinstance(sqlstate, str) and (
            sqlstate in (_READ_ONLY_SQLSTATE, *_NOT_USABLE_SQLSTATES)
            or sqlstate.startswith(_UNAVAILABLE_SQLSTATE_PREFIXES)
        ):
            return True
        if type(cause).__name__ in ("ConnectionDoesNotExistError", "InterfaceError") and (
            "closed" in str(cause) or "connection" in str(cause)
        ):
            return True
        if isinstance(cause, sqlite3.OperationalError):
            text = str(cause).lower()
            return any(marker in text for marker in _SQLITE_UNAVAILABLE_MARKERS)
    return False


def unavailable_from(
    error: BaseException, database: str, *, timeout: float | None = None
) -> StoreUnavailable:
    """A StoreUnavailable for ``error`` with a short reason (first line, no statement)."""
    chain = _chain(error)
    if any(isinstance(cause, TimeoutError | sa_exc.TimeoutError) for cause in chain):
        reason = "no answer" if timeout is None else f"no answer within {timeout:g} s"
    else:
        root = chain[-1]
        detail = str(root).strip().splitlines()[0][:200] if str(root).strip() else ""
        reason = f"{type(root).__name__}: {detail}" if detail else type(root).__name__
    if is_read_only(error):
        return StoreUnavailable(database, f"it is read-only ({reason})", read_only=True)
    return StoreUnavailable(database, reason)
