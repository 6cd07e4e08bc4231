"""The PostgreSQL shape of ``make bench``: a database of the bench's own on this machine's
server, N ``gpuops serve`` replicas on it, the load spread over them round-robin, and what
the server spent meanwhile.

Server side, per level (``ServerMonitor``):

- transactions: ``pg_stat_database`` ``xact_commit`` + ``xact_rollback`` of the bench's
  database, before and after, read once every backend has reported its counts: a backend
  reports them when it goes idle, but at most once a second; one that reported less than a
  second before reports the rest 10 s later (PostgreSQL's ``PGSTAT_IDLE_INTERVAL``), or
  when it exits. So a window ends ``flush_wait`` (10.5 s) after the load stopped, and
  starts as long after any load outside a window (the warm-up) or 1 s after a window's end
  (only ``gpuops audit verify`` ran in between, and an exiting backend reports at once);
- CPU of the database's backends: their pids from ``pg_stat_activity`` (sampled every
  ``interval`` s during the level, so that a backend that starts meanwhile counts from its
  start and one that exits counts up to its last sample), CPU from ``/proc/<pid>/stat``
  (utime + stime);
- CPU of the server's background processes (checkpointer, background writer, WAL writer,
  autovacuum): server-wide, shared with any other database, so reported beside the
  backends' and never attributed to the bench;
- wait events: every sample counts each non-idle backend of the database by its state and
  wait event (``active`` with no wait event: on the CPU or about to be).

The monitor's own connection is to the ``postgres`` database: its queries count in none of
the bench database's figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from bench.load import AiohttpSender
from bench.procs import Child, clean_env, free_port, gpuops_command
from bot.local.slack.sender import SenderResult, Tamper

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
BACKGROUND_TYPES = (
    "checkpointer",
    "background writer",
    "walwriter",
    "autovacuum launcher",
    "autovacuum worker",
)
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class PostgresMissing(RuntimeError):
    """The server the bench needs cannot be reached: a failure, never a skip."""


def database_url(admin_dsn: str, name: str) -> str:
    """The URL of database ``name`` on the admin DSN's server, as the replicas get it."""
    base, _, _ = admin_dsn.rpartition("/")
    return f"{base}/{name}"


async def _admin(admin_dsn: str) -> asyncpg.Connection:
    try:
        return await asyncpg.connect(admin_dsn, timeout=10)
    except (OSError, asyncpg.PostgresError) as exc:
        raise PostgresMissing(
            f"PostgreSQL is not reachable at {admin_dsn} ({exc!r}): make bench runs "
            "gpuops on it (start the server, or pass --pg-replicas '' to leave the "
            "PostgreSQL levels out)"
        ) from exc


async def check_server(admin_dsn: str) -> dict[str, str]:
    """The server's version and preloaded libraries; PostgresMissing if it cannot be
    reached."""
    conn = await _admin(admin_dsn)
    try:
        return {
            "version": str(await conn.fetchval("SHOW server_version")),
            "preload": str(await conn.fetchval("SHOW shared_preload_libraries")),
        }
    finally:
        await conn.close()


async def create_database(admin_dsn: str, label: str) -> str:
    name = f"gpuops_bench_{label}_{secrets.token_hex(4)}"
    conn = await _admin(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return name


async def drop_database(admin_dsn: str, name: str) -> None:
    conn = await _admin(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` from /proc/<pid>/stat (None: it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            raw = stat.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


@dataclass
class ProcCpu:
    """CPU of a changing set of processes over a window: each pid from when it was first
    seen (0 if it started in the window) to its last reading."""

    first: dict[int, float] = field(default_factory=dict)
    last: dict[int, float] = field(default_factory=dict)

    def see(self, pids: Sequence[int], *, at_start: bool = False) -> None:
        for pid in pids:
            seconds = proc_cpu_seconds(pid)
            if seconds is None:
                continue
            self.first.setdefault(pid, seconds if at_start else 0.0)
            self.last[pid] = seconds

    @property
    def seconds(self) -> float:
        return sum(self.last[pid] - self.first[pid] for pid in self.last)


_ACTIVITY = """
    SELECT pid, datname, backend_type, state, wait_event_type, wait_event
    FROM pg_stat_activity WHERE pid <> pg_backend_pid()
"""
_XACTS = "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = $1"


def wait_label(state: str | None, wait_type: str | None, wait_event: str | None) -> str | None:
    """What a sampled backend was doing (None: idle, not counted): ``idle in transaction``
    (waiting for the replica's next statement, inside a transaction), its wait event
    (``IO:WALSync``, ``Lock:transactionid``…), or ``CPU`` (active, no wait event)."""
    if state in (None, "idle"):
        return None
    if state != "active":
        return str(state)
    return "CPU" if wait_type is None else f"{wait_type}:{wait_event}"


@dataclass
class ServerFigures:
    """What the server did for the bench's database during one level."""

    commits: int
    rollbacks: int
    backend_cpu: float  # seconds
    background_cpu: float  # seconds, server-wide
    backends_seen: int
    samples: int
    waits: dict[str, int]  # label → backend-samples

    @property
    def transactions(self) -> int:
        return self.commits + self.rollbacks

    def as_dict(self) -> dict[str, Any]:
        return {
            "commits": self.commits,
            "rollbacks": self.rollbacks,
            "transactions": self.transactions,
            "backend_cpu_seconds": self.backend_cpu,
            "background_cpu_seconds": self.background_cpu,
            "backends_seen": self.backends_seen,
            "samples": self.samples,
            "waits": self.waits,
        }


class ServerMonitor:
    """The server's figures for database ``database`` over one window (start → stop)."""

    def __init__(
        self, admin_dsn: str, database: str, *, interval: float = 0.25, flush_wait: float = 10.5
    ) -> None:
        self.admin_dsn = admin_dsn
        self.database = database
        self.interval = interval
        self.flush_wait = flush_wait
        self._after_window = False  # the counters were last read at a window's end
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._backends = ProcCpu()
        self._background = ProcCpu()
        self._waits: Counter[str] = Counter()
        self._samples = 0
        self._xacts = (0, 0)

    async def open(self) -> None:
        self._conn = await _admin(self.admin_dsn)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _settled_xacts(self, at_least: float, quiet: float = 1.0) -> tuple[int, int]:
        """The database's transaction counters after ``at_least`` s, once they have not
        moved for ``quiet`` s (or as they are ``at_least`` + 5 s from now)."""
        assert self._conn is not None
        started = time.monotonic()
        last: tuple[int, int] | None = None
        since = started
        while True:
            await self._conn.execute("SELECT pg_stat_clear_snapshot()")
            row = await self._conn.fetchrow(_XACTS, self.database)
            now = (int(row["xact_commit"]), int(row["xact_rollback"])) if row else (0, 0)
            clock = time.monotonic()
            if now != last:
                last, since = now, clock
            if clock - started >= at_least and (
                clock - since >= quiet or clock - started >= at_least + 5.0
            ):
                return now
            await asyncio.sleep(0.2)

    async def _sample(self, *, at_start: bool = False) -> None:
        assert self._conn is not None
        rows = await self._conn.fetch(_ACTIVITY)
        ours = [r for r in rows if r["datname"] == self.database]
        self._backends.see([r["pid"] for r in ours], at_start=at_start)
        background = [r["pid"] for r in rows if r["backend_type"] in BACKGROUND_TYPES]
        self._background.see(background, at_start=at_start)
        if at_start:
            return
        self._samples += 1
        for row in ours:
            label = wait_label(row["state"], row["wait_event_type"], row["wait_event"])
            if label is not None:
                self._waits[label] += 1

    async def start(self) -> None:
        """Wait for the counters to settle, then take the baseline and start sampling."""
        self._backends, self._background = ProcCpu(), ProcCpu()
        self._waits, self._samples = Counter(), 0
        self._xacts = await self._settled_xacts(1.0 if self._after_window else self.flush_wait)
        self._after_window = False
        await self._sample(at_start=True)
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self._sample()

    async def stop(self) -> ServerFigures:
        """Stop sampling (once more now) and read the settled counters."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._sample()
        commits, rollbacks = await self._settled_xacts(self.flush_wait)
        self._after_window = True
        return ServerFigures(
            commits=commits - self._xacts[0],
            rollbacks=rollbacks - self._xacts[1],
            backend_cpu=self._backends.seconds,
            background_cpu=self._background.seconds,
            backends_seen=len(self._backends.last),
            samples=self._samples,
            waits=dict(self._waits.most_common()),
        )


class RoundRobinSender(AiohttpSender):
    """Each request to the next replica in turn, as a load balancer in front of them."""

    def __init__(self, events_urls: Sequence[str], *args: Any, **kwargs: Any) -> None:
        super().__init__(events_urls[0], *args, **kwargs)
        self._urls = itertools.cycle(events_urls)

    async def post(
        self,
        body: str,
        content_type: str,
        *,
        retry_num: int | None = None,
        retry_reason: str | None = None,
        tamper: Tamper | None = None,
    ) -> SenderResult:
        # AiohttpSender.post reads events_url before its first await: no other request
        # can move it in between.
        self.events_url = next(self._urls)
        return await super().post(
            body, content_type, retry_num=retry_num, retry_reason=retry_reason, tamper=tamper
        )


def replica_env(env: dict[str, str], url: str, name: str) -> dict[str, str]:
    """A replica's settings: the same as every other's (deploy/kubernetes: one Secret and
    ConfigMap), its own instance id."""
    return {**env, "GPUOPS_DATABASE_URL": url, "GPUOPS_INSTANCE_ID": name}


async def start_replicas(
    count: int, env: dict[str, str], url: str, workdir: Path, label: str
) -> list[Child]:
    """``count`` ``gpuops serve`` processes on ``url``, each on its own port, started one
    after the other (the first migrates the empty database; on a busy 2-core machine three
    starting at once took over a minute)."""
    replicas: list[Child] = []
    try:
        for index in range(count):
            name = f"{label}-{index + 1}"
            port = free_port()
            child_env = clean_env(replica_env(env, url, name))
            child = Child.spawn(name, gpuops_command(port), child_env, port, workdir)
            replicas.append(child)
            child.start_sampling()
            await child.wait_ready(within=180.0)
    except BaseException:
        for child in replicas:
            await child.stop()
        raise
    return replicas


@dataclass(frozen=True)
class ChainCheck:
    ok: bool
    output: str

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "output": self.output}


async def verify_chain(env: dict[str, str], url: str, workdir: Path) -> ChainCheck:
    """``gpuops audit verify`` on the database: exit 0 and "N entries, chain intact"."""
    serve = gpuops_command(0)
    argv = [*serve[: serve.index("serve")], "audit", "verify"]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=clean_env(replica_env(env, url, "bench-verify")),
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    text = out.decode(errors="replace").strip()
    return ChainCheck(ok=proc.returncode == 0, output=text.splitlines()[-1] if text else "")
