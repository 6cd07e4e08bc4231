"""The store against a PostgreSQL that fails, through the fault proxy (never by stopping the
shared server), and against a read-only SQLite file: StoreUnavailable in bounded time, naming
the database; renewal that survives a blip and detects a lost lease; health that tells."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import asyncpg
import pytest

from bot.core.store import Lease, Store, StoreUnavailable
from bot.local.faults.proxy import FaultProxy
from tests.conftest import PG_URL_TEMPLATE, create_pg_database, drop_pg_database

pytestmark = pytest.mark.postgres

# Bounds for a loaded machine: what the store promises, plus generous scheduling slack.
OPERATION_TIMEOUT = 1.0
CONNECT_TIMEOUT = 1.0
SLACK = 3.0
ROOMY = 15.0


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    fault_proxy = FaultProxy(target_port=5432)
    await fault_proxy.start()
    yield fault_proxy
    await fault_proxy.close()


@pytest.fixture
async def database() -> AsyncIterator[str]:
    name = await create_pg_database()
    yield name
    await drop_pg_database(name)


def _url(port: int, database: str) -> str:
    return PG_URL_TEMPLATE.format(name=database).replace(":5432/", f":{port}/")


async def _open(url: str) -> Store:
    return await Store.open(
        url, connect_timeout=CONNECT_TIMEOUT, operation_timeout=OPERATION_TIMEOUT
    )


async def _open_direct(url: str) -> Store:
    """A store straight on the shared PostgreSQL (no proxy, no fault): bounds that a busy
    machine's healthy database always meets, as they only matter when it fails."""
    return await Store.open(url, connect_timeout=ROOMY, operation_timeout=ROOMY)


@pytest.fixture
async def proxied(proxy: FaultProxy, database: str) -> AsyncIterator[Store]:
    await (await _open_direct(_url(5432, database))).close()  # migrated, without a bound
    store = await _open(_url(proxy.port, database))
    yield store
    await proxy.heal_async()
    await store.close()


@pytest.fixture
async def direct(database: str) -> AsyncIterator[Store]:
    store = await _open_direct(_url(5432, database))
    yield store
    await store.close()


async def _timed_unavailable(call: Awaitable[object]) -> tuple[StoreUnavailable, float]:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as raised:
        await call
    return raised.value, time.monotonic() - started


async def test_a_hanging_database_raises_store_unavailable_within_the_bound(
    proxied: Store, proxy: FaultProxy
) -> None:
    assert await proxied.get_request("CR-NONE22") is None
    proxy.hang()
    error, took = await _timed_unavailable(proxied.get_request("CR-NONE22"))
    assert took < OPERATION_TIMEOUT + SLACK
    assert "no answer within" in str(error) and proxied.database in str(error)
    proxy.drop()
    proxy.heal()
    assert await proxied.get_request("CR-NONE22") is None  # the pool recovers by itself


async def test_refused_and_reset_connections_raise_store_unavailable(
    proxied: Store, proxy: FaultProxy
) -> None:
    await proxy.outage()
    error, took = await _timed_unavailable(proxied.list_requests(limit=1))
    assert took < CONNECT_TIMEOUT + SLACK
    assert not error.read_only
    assert not await proxied.healthy()
    await proxy.heal_async()
    assert await proxied.healthy()


async def test_a_slow_database_within_the_bound_still_answers(
    proxied: Store, proxy: FaultProxy
) -> None:
    proxy.slow(0.05)
    assert await proxied.list_requests(limit=1) == []
    proxy.heal()


async def test_renewal_survives_a_blip(proxied: Store, proxy: FaultProxy) -> None:
    # a lease far longer than the blip, however slowly a busy machine gets through it
    lease = await proxied.take_lease("exec:blip", "r1", 60.0)
    assert lease is not None
    await proxy.outage()
    with pytest.raises(StoreUnavailable):
        await proxied.renew_lease(lease, 60.0)
    await proxy.heal_async()
    renewed = await proxied.renew_lease(lease, 60.0)
    assert renewed is not None and renewed.token == lease.token


async def _renew_until_settled(store: Store, lease: Lease, deadline: float) -> Lease | None:
    """Renew as an executor's heartbeat would: retry through outages; stop when it is lost."""
    while time.monotonic() < deadline:
        try:
            return await store.renew_lease(lease, 0.5)
        except StoreUnavailable:
            await asyncio.sleep(0.2)
    raise AssertionError("the store never came back")


async def test_a_long_outage_loses_the_lease_and_the_loss_is_detected(
    proxied: Store, direct: Store, proxy: FaultProxy
) -> None:
    lease = await proxied.take_lease("exec:long", "r1", 0.5)
    assert lease is not None
    await proxy.outage()
    await asyncio.sleep(1.2)
    other = await direct.take_lease("exec:long", "r2", 30)  # the other replica's recovery
    assert other is not None and other.token == lease.token + 1
    renewing = asyncio.create_task(_renew_until_settled(proxied, lease, time.monotonic() + 20))
    await asyncio.sleep(0.5)
    await proxy.heal_async()
    assert await renewing is None


async def test_open_names_the_database_when_it_is_refused_or_hangs(
    proxy: FaultProxy, database: str
) -> None:
    proxy.refuse()
    error, took = await _timed_unavailable(_open(_url(proxy.port, database)))
    expected = f"postgresql://postgres@127.0.0.1:{proxy.port}/{database}"
    assert str(error).startswith(f"the state store {expected} is unavailable: ")
    assert took < CONNECT_TIMEOUT + SLACK
    await proxy.heal_async()
    proxy.hang()
    error, took = await _timed_unavailable(_open(_url(proxy.port, database)))
    assert expected in str(error) and "no answer" in str(error)
    assert took < CONNECT_TIMEOUT + OPERATION_TIMEOUT + SLACK


async def test_open_never_shows_the_password(proxy: FaultProxy, database: str) -> None:
    proxy.refuse()
    url = f"postgresql://postgres:hunter2-secret@127.0.0.1:{proxy.port}/{database}"
    with pytest.raises(StoreUnavailable) as raised:
        await _open(url)
    assert "hunter2" not in str(raised.value)
    assert "hunter2" not in repr(raised.value.__cause__ or "")


async def test_a_read_only_postgresql_database_is_refused_and_unhealthy(database: str) -> None:
    async with await _open_direct(_url(5432, database)) as store:  # migrated while writable
        assert await store.healthy(within_seconds=ROOMY)
        admin = await asyncpg.connect(PG_URL_TEMPLATE.format(name=database), timeout=10)
        try:
            await admin.execute(
                f'ALTER DATABASE "{database}" SET default_transaction_read_only = on'
            )
        finally:
            await admin.close()
        await store.engine.dispose()  # new sessions pick the setting up
        assert not await store.healthy()
    with pytest.raises(StoreUnavailable, match="read-only") as raised:
        await _open_direct(_url(5432, database))
    assert raised.value.read_only


async def test_a_read_only_sqlite_file_is_refused_at_start_up(tmp_path: Path) -> None:
    path = tmp_path / "gpuops.db"
    async with await Store.open(f"sqlite:///{path}") as store:
        assert await store.healthy()
    # Root ignores file modes, so open the file read-only as SQLite sees a 444 file.
    with pytest.raises(StoreUnavailable, match="read-only") as raised:
        await Store.open(f"sqlite:///file:{path}?mode=ro&uri=true")
    assert raised.value.read_only and str(path) in str(raised.value)


_OPEN_AS_USER = """
import asyncio, sys
from bot.core.store import Store, StoreUnavailable
async def main() -> None:
    try:
        await Store.open(sys.argv[1])
    except StoreUnavailable as exc:
        print(exc)
        raise SystemExit(3) from None
asyncio.run(main())
"""


async def test_a_444_sqlite_file_in_a_writable_folder_is_refused() -> None:
    """The case as an operator met it: file mode 444, folder writable, an unprivileged user
    (as root, the test drops to nobody: root ignores file modes)."""
    folder = Path(tempfile.mkdtemp(prefix="gpuops-ro-"))
    try:
        folder.chmod(0o777)
        path = folder / "gpuops.db"
        await (await Store.open(f"sqlite:///{path}")).close()  # a migrated database file
        path.chmod(0o444)
        as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        command = [*(as_user if os.geteuid() == 0 else []), sys.executable, "-c", _OPEN_AS_USER]
        process = await asyncio.create_subprocess_exec(
            *command,
            f"sqlite:///{path}",
            cwd=Path(__file__).resolve().parents[3],
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
    finally:
        shutil.rmtree(folder)
    assert process.returncode == 3, err.decode()
    assert f"the state store sqlite:///{path} is unavailable: it is read-only" in out.decode()
