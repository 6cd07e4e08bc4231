"""``make bench-scale``: gpuops with a year of history and thousands of clusters.

    .venv/bin/python -m bench.scale [--sizes 0,10k,100k,1M] [--clusters 10,100,1000,5000]
        [--open 10,1k,10k] [--watch-every 15] [--reps 9] [--out DIR]

Per history size (requests, 3 audit entries each, preloaded by bench.scale_preload): the CPU
and SQL statements of an update, ``/gpu list``, ``/gpu show``, ``/gpu audit``, ``/gpu
timeline`` (24 h and 7 d, in a quiet channel and in the notify channel), Home publish
(operator and admin), a scheduler tick and a sweeper round; ``gpuops serve``'s start-up;
``gpuops audit export`` / ``verify`` with their peak RSS. Per open-request count: a tick
and a round. Per cluster count: the fleet snapshot's refresh, a list page (first and last)
and Home; at the largest, watcher rounds with ``/healthz`` and ``/metrics`` probed.

Writes ``scale.json`` under ``bench/results/``, prints the tables and exits 1 naming every
target missed (ratios between sizes of this run: see docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
from sqlalchemy import event
from sqlalchemy.engine import Connection

from bench.postgres import ADMIN_DSN, create_database, database_url, drop_database
from bench.scale_children import Probe, audit_runs, startups, watch_rounds
from bench.scale_preload import Template, preload, read_template, with_values
from bench.scale_report import Targets, checks, table
from bot.core.paging import LIST_PAGE_SIZE
from bot.core.store import Store
from bot.core.store.tables import change_requests
from bot.core.watch.remediations import LISTINGS_PER_POLL
from bot.local.demo.stack import (
    CHANNELS,
    DEMO_BOT_TOKEN,
    DEMO_POLICY,
    USERGROUPS,
    USERS,
    WATCHED_DEMO_POLICY,
    LocalStack,
    StackOptions,
    handlers_finished,
)
from bot.local.slack.server import FakeSlack

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
DAVE, ALICE = "U04DAVE", "U01ALICE"
QUIET, NOTIFY = "C0INCIDENT", "C0GPUAUDIT"
PROJECT, TEMPLATE_CLUSTER, SHOWN = "together-prod", "tc-h200-ondemand", "tc-h100-reserved"
UPDATE = f'update {PROJECT} {TEMPLATE_CLUSTER} num_gpus=16 reason="bench-scale"'


def _count(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * scale)


def _counts(text: str) -> list[int]:
    return [_count(item) for item in text.split(",") if item.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("--sizes", default="0,10k,100k,1M", help="requests of history")
    parser.add_argument("--clusters", default="10,100,1000,5000", help="clusters in a project")
    parser.add_argument("--open", default="10,1k,10k", help="open and scheduled requests")
    parser.add_argument("--watch-every", type=float, default=15.0, help="watch interval, s")
    parser.add_argument("--watch-rounds", type=int, default=2)
    parser.add_argument("--startup-runs", type=int, default=3, help="the quickest is kept")
    parser.add_argument("--reps", type=int, default=9, help="runs of each figure (median)")
    parser.add_argument(
        "--backend",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="the history's store (postgresql: a database of its own per size on "
        "127.0.0.1:5432, created and dropped)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--workdir", type=Path, default=None, help="keep the stores here")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="take the SQLite stores a run left in --workdir as they are (no new preload)",
    )
    return parser.parse_args(argv)


class Counted:
    """The SQL statements run on an engine (BEGIN left out), while installed."""

    def __init__(self, store: Store) -> None:
        self.engine = store._engine.sync_engine
        self.statements = 0

    def _seen(self, _conn: Connection, _cursor: Any, statement: str, *_: Any) -> None:
        if not statement.lstrip().upper().startswith("BEGIN"):
            self.statements += 1

    def __enter__(self) -> Counted:
        event.listen(self.engine, "before_cursor_execute", self._seen)
        return self

    def __exit__(self, *_: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._seen)


async def measure(
    store: Store, op: Callable[[], Awaitable[object]], reps: int, *, warm: int = 1
) -> dict[str, float]:
    """The median CPU ms of ``op`` (this process: the bot, the Slack stand-in and the
    simulators) and its statements (mean), over ``reps`` runs after ``warm``."""
    for _ in range(warm):
        await op()
    times: list[float] = []
    with Counted(store) as counted:
        for _ in range(reps):
            gc.collect()
            started = time.process_time()
            await op()
            times.append((time.process_time() - started) * 1000)
    return {
        "cpu_ms": round(statistics.median(times), 2),
        "statements": round(counted.statements / max(reps, 1), 1),
    }


class Session:
    """The bot in one process with the Slack stand-in and the simulators, on a store."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.store = stack.runtime.store

    @classmethod
    async def start(cls, database_url: str, workdir: Path, policy: str = DEMO_POLICY) -> Session:
        options = StackOptions(
            policy_yaml=policy,
            database_url=database_url,
            poll_seconds=0,
            # Settled at once: an update's polls until steady, and so its CPU, do not depend
            # on how long the machine took between them.
            transition_seconds=0.0,
            sweep_seconds=3600,
            extra_settings={"gpuops_schedule_tick_seconds": 3600},
        )
        return cls(await LocalStack.start(options, workdir))

    async def command(self, user: str, channel: str, text: str) -> None:
        answer = await self.stack.sender.command(user, channel, text)
        if answer.status != 200:
            raise RuntimeError(f"/gpu {text} was answered {answer.status}: {answer.body}")
        await handlers_finished(within=60.0)

    async def update(self) -> None:
        """The bench's scale-up (no approval needed), until its result is posted."""
        local = self.stack
        local.together.remove(TEMPLATE_CLUSTER)
        local.together.clusters[TEMPLATE_CLUSTER] = copy.deepcopy(self.template_cluster)
        posts = len(local.slack.calls_to("chat.postMessage"))
        await self.command(DAVE, QUIET, UPDATE)
        await local.slack.wait_for(  # its root, its summary and its mirror
            lambda: len(local.slack.calls_to("chat.postMessage")) >= posts + 3 or None,
            within=60.0,
        )
        await local.runtime.workflow.drain()

    async def home(self, user: str) -> None:
        published = len(self.stack.slack.calls_to("views.publish"))
        await self.stack.sender.app_home_opened(user)
        await self.stack.slack.wait_for(
            lambda: len(self.stack.slack.calls_to("views.publish")) > published or None,
            within=60.0,
        )
        await handlers_finished(within=60.0)

    @property
    def template_cluster(self) -> dict[str, Any]:
        if not hasattr(self, "_template_cluster"):
            self._template_cluster = copy.deepcopy(self.stack.together.clusters[TEMPLATE_CLUSTER])
        return self._template_cluster

    async def stop(self) -> None:
        await self.stack.stop()


async def make_template(workdir: Path) -> Template:
    """One update through the product on a scratch store: the rows the preload copies."""
    url = f"sqlite:///{workdir / 'template.db'}"
    session = await Session.start(url, workdir)
    try:
        _ = session.template_cluster
        await session.update()
        records = await session.store.list_audit(project=PROJECT, limit=10)
        request_id = next(e.request_id for e in records if e.request_id)
        return await read_template(session.store, request_id)
    finally:
        await session.stop()


async def add_waiting(store: Store, template: Template, count: int, now: datetime) -> None:
    """``count`` pending requests (expiring tomorrow) and ``count`` scheduled for tomorrow."""
    rows = []
    for n in range(count):
        common = {
            "created_at": now,
            "updated_at": now,
            "channel": "C0HISTORY",
            "cluster_id": f"hist-wait-{n % 40:02d}",
            "cluster_name": f"waiting-{n % 40:02d}",
        }
        rows.append(
            with_values(
                template.request,
                id=f"CR-P{n:07d}",
                state="pending",
                expires_at=now + timedelta(days=1),
                run_at=None,
                last_transition=None,
                revert_of=None,
                revert_slot=None,
                requester=f"U0OPEN{n % 50:04d}",
                **common,
            )
        )
        rows.append(
            with_values(
                template.request,
                id=f"CR-S{n:07d}",
                state="approved",
                expires_at=None,
                run_at=now + timedelta(days=1),
                last_transition=None,
                revert_of=None,
                revert_slot=None,
                requester=f"U0OPEN{n % 50:04d}",
                **common,
            )
        )
    async with store._engine.begin() as conn:
        await conn.execute(change_requests.insert(), rows)


async def clear_waiting(store: Store) -> None:
    async with store._engine.begin() as conn:
        await conn.execute(
            change_requests.delete().where(
                change_requests.c.id.like("CR-P%") | change_requests.c.id.like("CR-S%")
            )
        )


async def history_store(size: int, workdir: Path, args: argparse.Namespace) -> str:
    """The store of one history size: a SQLite file in ``workdir``, or a PostgreSQL
    database of its own (created here, dropped by ``drop_history_stores``)."""
    if args.backend == "sqlite":
        return f"sqlite:///{workdir / f'history-{size}.db'}"
    return database_url(ADMIN_DSN, await create_database(ADMIN_DSN, f"scale{size}"))


async def drop_history_stores(urls: list[str]) -> None:
    for url in urls:
        if url.startswith("postgresql"):
            await drop_database(ADMIN_DSN, url.rsplit("/", 1)[-1])


async def history_size(
    url: str,
    size: int,
    template: Template,
    workdir: Path,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Every figure of one history size (see the module docstring) but its start-up, which
    ``startup_figures`` measures for every size together."""
    now = datetime.now(UTC)
    reused = args.reuse and _stored(url)
    store = await Store.open(url)
    try:
        seconds = 0.0
        if not reused:
            seconds = await preload(store, template, size, now, people=(DAVE, ALICE))
        await clear_waiting(store)
        await add_waiting(store, template, 10, now)
    finally:
        await store.close()
    print(f"  history {size:>9,}: preloaded in {seconds:.1f} s{' (reused)' * reused}", flush=True)
    result: dict[str, Any] = {"requests": size, "audit_entries": size * 3, "preload_s": seconds}
    result["audit"] = {k: v.as_json() for k, v in audit_runs(url, workdir).items()}
    session = await Session.start(url, workdir)
    try:
        result["ops"] = await _history_ops(session, args.reps)
        if size == _open_series_size(args):
            result["open"] = await _open_series(session, template, _counts(args.open), args.reps)
    finally:
        await session.stop()
    return result


async def startup_figures(
    urls: dict[int, str], history: dict[str, Any], workdir: Path, args: argparse.Namespace
) -> None:
    """``gpuops serve``'s start-up on every size's store, interleaved (the same machine for
    each), into ``history``; with the load average meanwhile (the machine is shared)."""
    fake = FakeSlack(DEMO_BOT_TOKEN, channels=CHANNELS, users=USERS, usergroups=USERGROUPS)
    await fake.start()
    try:
        load_before = os.getloadavg()[0]
        envs = {str(size): _serve_env(url, fake, workdir) for size, url in urls.items()}
        found = await startups(envs, workdir, runs=args.startup_runs)
        load_after = os.getloadavg()[0]
    finally:
        await fake.stop()
    for size, seen in found.items():
        history[size]["startup_s"] = round(seen.wall, 3)
        history[size]["startup_cpu_s"] = round(seen.cpu, 3)
        history[size]["startup_cpu_runs"] = seen.cpu_runs
        history[size]["startup_load"] = [round(load_before, 2), round(load_after, 2)]


def _stored(url: str) -> bool:
    """A SQLite store a run left (``--reuse``)."""
    return url.startswith("sqlite:///") and Path(url.removeprefix("sqlite:///")).exists()


def _open_series_size(args: argparse.Namespace) -> int:
    """The history size the open-request series runs at: 10k if asked for, else the largest."""
    sizes = _counts(args.sizes)
    return 10_000 if 10_000 in sizes else max(sizes)


def _serve_env(url: str, fake: FakeSlack, workdir: Path) -> dict[str, str]:
    from bot.local.demo.stack import DEMO_BOT_TOKEN, DEMO_SIGNING_SECRET

    policy = workdir / "startup-policy.yml"
    policy.write_text(DEMO_POLICY)
    return {
        "SLACK_BOT_TOKEN": DEMO_BOT_TOKEN,
        "SLACK_SIGNING_SECRET": DEMO_SIGNING_SECRET,
        "SLACK_API_URL": fake.api_url,
        "GPUOPS_POLICY": str(policy),
        "GPUOPS_DATABASE_URL": url,
        "GPUOPS_LOG_LEVEL": "WARNING",
        "GPUOPS_INSTANCE_ID": "bench-scale",
        "TOGETHER_BASE_URL": "http://127.0.0.1:9",  # nothing is asked of a provider
        "E2E_BASE_URL": "http://127.0.0.1:9",
        "TOGETHER_API_KEY": "bench",
        "E2E_API_KEY": "bench",
        "E2E_AUTH_TOKEN": "bench",
    }


async def _history_ops(session: Session, reps: int) -> dict[str, dict[str, float]]:
    store = session.store
    _ = session.template_cluster
    ops: dict[str, Callable[[], Awaitable[object]]] = {
        "update": session.update,
        "list": lambda: session.command(DAVE, QUIET, f"list {PROJECT}"),
        "show": lambda: session.command(DAVE, QUIET, f"show {PROJECT} {SHOWN}"),
        "audit": lambda: session.command(ALICE, QUIET, f"audit {PROJECT}"),
        "timeline_24h_quiet": lambda: session.command(ALICE, QUIET, "timeline 24h"),
        "timeline_7d_quiet": lambda: session.command(ALICE, QUIET, "timeline 7d"),
        "timeline_24h_notify": lambda: session.command(ALICE, NOTIFY, "timeline 24h"),
        "timeline_7d_notify": lambda: session.command(ALICE, NOTIFY, "timeline 7d"),
        "home_operator": lambda: session.home(DAVE),
        "home_admin": lambda: session.home(ALICE),
        "scheduler_tick": session.stack.runtime.workflow.scheduler.run_due,
        "sweeper_round": session.stack.runtime.workflow.sweep_once,
    }
    figures = {}
    for name, op in ops.items():
        few = max(3, reps // 3) if name == "timeline_7d_notify" else reps
        figures[name] = await measure(store, op, few)
    return figures


async def _open_series(
    session: Session, template: Template, counts: list[int], reps: int
) -> dict[str, dict[str, dict[str, float]]]:
    store, workflow = session.store, session.stack.runtime.workflow
    series: dict[str, dict[str, dict[str, float]]] = {}
    for count in counts:
        await clear_waiting(store)
        await add_waiting(store, template, count, datetime.now(UTC))
        series[str(count)] = {
            "scheduler_tick": await measure(store, workflow.scheduler.run_due, reps),
            "sweeper_round": await measure(store, workflow.sweep_once, reps),
        }
    await clear_waiting(store)
    return series


def _grow(session: Session, clusters: int) -> None:
    """together-prod holds exactly ``clusters`` clusters (copies of a seeded one)."""
    sim = session.stack.together
    template = copy.deepcopy(sim.clusters[SHOWN])
    project_id = template["project_id"]
    for cluster_id in [c for c, v in sim.clusters.items() if v["project_id"] == project_id]:
        if cluster_id.startswith("tc-scale-"):
            del sim.clusters[cluster_id]
    have = sum(1 for v in sim.clusters.values() if v["project_id"] == project_id)
    for n in range(max(0, clusters - have)):
        clone = copy.deepcopy(template)
        clone["cluster_id"], clone["cluster_name"] = f"tc-scale-{n:05d}", f"scale-{n:05d}"
        sim.clusters[clone["cluster_id"]] = clone


async def cluster_sizes(
    counts: list[int], workdir: Path, reps: int
) -> dict[str, dict[str, dict[str, float]]]:
    """Per cluster count: a snapshot refresh, list pages and Home from the snapshot."""
    session = await Session.start(f"sqlite:///{workdir / 'clusters.db'}", workdir)
    fleet = session.stack.runtime.ops.access.fleet
    # As the watcher would: the snapshot is the poll's (refreshed below), not a reader's.
    fleet.watched(PROJECT, 3600.0)
    fleet.watched("e2e-delhi", 3600.0)
    results: dict[str, dict[str, dict[str, float]]] = {}
    try:
        for count in counts:
            _grow(session, count)
            refresh = await measure(
                session.store, lambda: fleet.refresh(PROJECT), max(3, reps // 3)
            )
            refresh["per_cluster_ms"] = round(refresh["cpu_ms"] / count, 4)
            pages = max(1, math.ceil(count / LIST_PAGE_SIZE))
            results[str(count)] = {
                "snapshot_refresh": refresh,
                "list_first": await measure(
                    session.store, lambda: session.command(DAVE, QUIET, f"list {PROJECT}"), reps
                ),
                "list_last": await measure(session.store, _list_page(session, pages), reps),
                "home_operator": await measure(session.store, lambda: session.home(DAVE), reps),
                "home_admin": await measure(session.store, lambda: session.home(ALICE), reps),
            }
            print(f"  clusters {count:>5}: {_brief(results[str(count)])}", flush=True)
    finally:
        await session.stop()
    return results


def _list_page(session: Session, page: int) -> Callable[[], Awaitable[None]]:
    return lambda: session.command(DAVE, QUIET, f"list {PROJECT} page={page}")


def _brief(figures: dict[str, dict[str, float]]) -> str:
    return ", ".join(f"{k} {v['cpu_ms']:.1f} ms" for k, v in figures.items())


async def watcher_at(clusters: int, every: float, rounds: int, workdir: Path) -> dict[str, Any]:
    """``gpuops serve`` watching together-prod at ``clusters`` clusters: each round's time,
    its provider calls and the child's CPU per round; ``/healthz`` and ``/metrics`` asked
    every 0.2 s meanwhile."""
    from bench.driver import Bench, BenchConfig
    from bench.procs import Child, clean_env, free_port, gpuops_command

    config = BenchConfig(levels=(1,), watch_clusters=clusters, watch_every=every)
    bench = Bench(config, workdir)
    env = await bench.start_fakes()
    policy = workdir / "policy.yml"
    policy.write_text(WATCHED_DEMO_POLICY)
    port = free_port()
    child = Child.spawn("watcher", gpuops_command(port), clean_env(env), port, workdir)
    sim = bench.together
    try:
        await child.wait_ready(within=120.0)
        probe = Probe(child.base_url)
        probe.start()
        proc = psutil.Process(child.proc.pid)
        seen = await watch_rounds(
            lambda: (len(sim.calls(route="list")), len(sim.requests)),
            rounds,
            lambda: float(sum(proc.cpu_times()[:2])),
            within=every * (rounds + 3) + 120,
        )
        probe.stop()
    finally:
        await child.stop()
        await bench.stop_fakes()
    durations = [end - start for start, end in zip(seen.starts, seen.ends, strict=False)]
    calls = seen.calls
    per_round_cpu = seen.cpu / max(1, len(seen.ends))  # whole intervals, idle time included
    return {
        "clusters": clusters,
        "every_s": every,
        "round_s": [round(d, 3) for d in durations],
        "calls_per_round": calls,
        "calls_bound": 1 + LISTINGS_PER_POLL + 10,
        "cpu_per_round_ms": round(per_round_cpu * 1000, 1),
        "cpu_per_cluster_ms": round(per_round_cpu * 1000 / clusters, 4),
        "healthz_worst_s": round(probe.worst["healthz"], 3),
        "metrics_worst_s": round(probe.worst["metrics"], 3),
        "probe_failures": probe.failed,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpuops-scale-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        print("bench-scale: a template request through the product", flush=True)
        template = await make_template(workdir)
        history: dict[str, Any] = {}
        urls: dict[int, str] = {}
        try:
            for size in _counts(args.sizes):
                urls[size] = await history_store(size, workdir, args)
                history[str(size)] = await history_size(urls[size], size, template, workdir, args)
                print(f"  history {size:>9,}: {_brief(history[str(size)]['ops'])}", flush=True)
            if urls:
                print("  start-up of every size, interleaved", flush=True)
                await startup_figures(urls, history, workdir, args)
        finally:
            await drop_history_stores(list(urls.values()))
        counts = _counts(args.clusters)
        clusters = await cluster_sizes(counts, workdir, args.reps) if counts else {}
        watcher = (
            await watcher_at(max(counts), args.watch_every, args.watch_rounds, workdir)
            if counts
            else None
        )
    return {
        "generated_at": datetime.now(UTC).isoformat(),
        "backend": args.backend,
        "config": {k: str(v) for k, v in vars(args).items()},
        "history": history,
        "clusters": clusters,
        "watcher": watcher,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = asyncio.run(run(args))
    report["checks"] = checks(report, Targets())
    args.out.mkdir(parents=True, exist_ok=True)
    name = "scale.json" if args.backend == "sqlite" else f"scale-{args.backend}.json"
    (args.out / name).write_text(json.dumps(report, indent=2) + "\n")
    print()
    print(table(report))
    print(f"written to {args.out / name}")
    missed = [c for c in report["checks"] if not c["ok"]]
    if missed:
        print(f"\n{len(missed)} target(s) missed:", file=sys.stderr)
        for check in missed:
            print(f"  MISSED {check['target']}: {check['detail']}", file=sys.stderr)
        return 1
    unmeasured = [c for c in report["checks"] if c.get("not_measurable")]
    for check in unmeasured:
        print(f"NOT MEASURABLE HERE {check['target']}: {check['detail']}")
    print(f"all targets met{f', but {len(unmeasured)} not measurable here' * bool(unmeasured)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
