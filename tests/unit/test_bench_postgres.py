"""The PostgreSQL helpers of the benchmark: CPU read from /proc, backends that come and go
during a level, the wait-event labels, the round-robin spread over the replicas, and a
server that cannot be reached failing the run with a clear message."""

from __future__ import annotations

import os
import time
from types import TracebackType
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest

from bench.driver import BenchConfig, run_benchmark
from bench.postgres import (
    PostgresMissing,
    ProcCpu,
    RoundRobinSender,
    database_url,
    proc_cpu_seconds,
    wait_label,
)
from bot.local.slack.server import FakeSlack


def test_cpu_of_a_process_is_read_from_proc_stat() -> None:
    started = time.process_time()
    while time.process_time() - started < 0.05:  # some CPU of our own to count
        pass
    seconds = proc_cpu_seconds(os.getpid())
    assert seconds is not None and seconds > 0
    assert abs(seconds - sum(psutil.Process().cpu_times()[:2])) < 0.05
    assert proc_cpu_seconds(2**22 + 1) is None  # past pid_max: gone


def test_a_backend_seen_first_mid_level_counts_from_zero_and_a_gone_one_keeps_its_last() -> None:
    cpu = ProcCpu(first={}, last={})
    cpu.see([os.getpid()], at_start=True)
    first = cpu.first[os.getpid()]
    assert first > 0 and cpu.seconds == 0.0
    cpu.first[4242], cpu.last[4242] = 0.0, 0.3  # a backend started and gone meanwhile
    cpu.see([os.getpid(), 2**22 + 1])  # the gone one has no reading: it keeps its last
    assert cpu.seconds >= 0.3 and 2**22 + 1 not in cpu.last


def test_wait_labels_name_what_a_backend_was_doing() -> None:
    assert wait_label("idle", "Client", "ClientRead") is None
    assert wait_label("active", None, None) == "CPU"
    assert wait_label("active", "IO", "WALSync") == "IO:WALSync"
    assert wait_label("idle in transaction", "Client", "ClientRead") == "idle in transaction"
    assert wait_label("active", "Lock", "tuple") == "Lock:tuple"


class _Response:
    status = 200

    async def read(self) -> bytes:
        return b""

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        return None


class _Session:
    def __init__(self) -> None:
        self.urls: list[str] = []

    def post(self, url: str, **_: Any) -> _Response:
        self.urls.append(url)
        return _Response()


async def test_requests_go_to_the_replicas_in_turn() -> None:
    session = _Session()
    urls = ["http://a/slack/events", "http://b/slack/events", "http://c/slack/events"]
    sender = RoundRobinSender(urls, "secret", FakeSlack("xoxb-t"), session)
    for _ in range(7):
        await sender.post("a=1", "application/x-www-form-urlencoded")
    assert session.urls == urls * 2 + urls[:1]


def test_a_replica_database_url_is_on_the_admin_server() -> None:
    admin = "postgresql://postgres@127.0.0.1:5432/postgres"
    assert database_url(admin, "b1") == "postgresql://postgres@127.0.0.1:5432/b1"


async def test_a_server_that_cannot_be_reached_fails_the_run_before_any_level() -> None:
    config = BenchConfig(pg_admin_dsn="postgresql://postgres@127.0.0.1:1/postgres")
    with pytest.raises(PostgresMissing, match=r"PostgreSQL is not reachable at .*:1/postgres"):
        await run_benchmark(config, log=lambda *_: None)
