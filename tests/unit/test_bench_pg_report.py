"""The PostgreSQL levels' judgement in the benchmark report: the targets per level, the
3-against-1-replica scaling and its "not measurable here" verdict when the bench's own
processes saturate the cores, and the costs per update with the shows left out."""

from __future__ import annotations

from typing import Any

from pytest import approx

from bench.load import LevelOutcome, Op
from bench.pg_report import (
    pg_level_entry,
    pg_show_costs,
    postgres_checks,
    saturated,
    scaling_checks,
)
from bench.report import Targets, verdict

TARGETS = Targets()
CPUS = 2


def level(
    replicas: int,
    concurrency: int = 50,
    *,
    rate: float = 20.0,
    cpu: float = 10.0,
    server_cpu: float = 3.0,
    bench_cores: float = 1.0,
    others: float = 0.0,
    statements: float = 5.0,
    server_tx: float = 4.0,
    chain_ok: bool = True,
) -> dict[str, Any]:
    return {
        "concurrency": concurrency,
        "replicas": replicas,
        "updates_per_second": rate,
        "cpu_ms_per_update": cpu,
        "server_cpu_ms_per_update": server_cpu,
        "total_cpu_ms_per_update": cpu + server_cpu,
        "cores": {
            "bench": bench_cores,
            "app": bench_cores * 0.6,
            "server": bench_cores * 0.2,
            "driver": bench_cores * 0.2,
            "others": others,
        },
        "waits": {"CPU": 0.5, "IO:WALSync": 0.3, "Lock:transactionid": 0.2},
        "statements_per_update": statements,
        "server_transactions_per_update": server_tx,
        "transactions_per_update": 4.0,
        "lost": 0,
        "duplicated": 0,
        "unmatched_puts": 0,
        "updates": 100,
        "shows": 25,
        "ack": {"p99": 0.02},
        "ack_errors": 0,
        "chain": {"ok": chain_ok, "output": "375 entries, chain intact" if chain_ok else "broken"},
    }


def pg(*levels: dict[str, Any]) -> dict[str, Any]:
    groups: dict[int, list[dict[str, Any]]] = {}
    for lv in levels:
        groups.setdefault(lv["replicas"], []).append(lv)
    return {"groups": [{"replicas": n, "levels": lvs} for n, lvs in groups.items()]}


def by_target(checks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["target"]: c for c in checks}


def test_three_replicas_that_scale_meet_both_scaling_targets() -> None:
    checks = by_target(scaling_checks(pg(level(1), level(3, rate=52.0, cpu=11.0)), CPUS, TARGETS))
    rate = checks["updates/s 3 vs 1 replicas @50"]
    cpu = checks["CPU per update 3 vs 1 replicas @50"]
    assert rate["ok"] and "not_measurable" not in rate and verdict(rate) == "ok"
    assert rate["detail"].startswith("52.0 vs 20.0 updates/s = 2.6x (≥ 2.5x)")
    assert cpu["ok"] and "14.0 vs 13.0 ms" in cpu["detail"]


def test_saturated_cores_make_the_speedup_not_measurable_but_never_the_cpu() -> None:
    # 1.8 of 2 cores busy with the bench's own processes: exactly the threshold
    more = level(3, rate=30.0, cpu=13.0, bench_cores=1.8)
    checks = by_target(scaling_checks(pg(level(1), more), CPUS, TARGETS))
    rate = checks["updates/s 3 vs 1 replicas @50"]
    cpu = checks["CPU per update 3 vs 1 replicas @50"]
    assert rate["ok"] and rate["not_measurable"] and verdict(rate) == "not measurable here"
    assert rate["detail"].startswith("not measurable here: cores saturated (1.80 of 2 cores busy")
    assert "server waits: CPU 50%, IO:WALSync 30%, Lock:transactionid 20%" in rate["detail"]
    assert "1.5x (≥ 2.5x)" in rate["detail"]
    # 16 against 13 ms per update: 1.23x, a regression the saturation does not excuse
    assert not cpu["ok"] and verdict(cpu) == "**MISSED**" and "1.2x (≤ 1.2x)" in cpu["detail"]


def test_other_processes_busy_cores_do_not_excuse_a_speedup_short_of_the_target() -> None:
    more = level(3, rate=30.0, bench_cores=1.79, others=0.2)
    assert saturated(more, CPUS, TARGETS) is None
    rate = by_target(scaling_checks(pg(level(1), more), CPUS, TARGETS))[
        "updates/s 3 vs 1 replicas @50"
    ]
    assert not rate["ok"] and "not_measurable" not in rate and verdict(rate) == "**MISSED**"
    assert "with 3: 1.79 of 2 cores busy" in rate["detail"] and "others 0.20" in rate["detail"]


def test_a_run_without_both_replica_counts_at_the_level_misses_the_scaling_target() -> None:
    [check] = scaling_checks(pg(level(1), level(3, concurrency=10)), CPUS, TARGETS)
    assert not check["ok"] and "not run" in check["detail"]


def test_each_postgresql_level_is_held_to_its_targets() -> None:
    sqlite = [{"concurrency": 50, "gpuops": {"cpu_ms_per_update": 8.0}}]
    good = level(1, cpu=10.4)  # 1.3x SQLite's 8.0
    bad = level(3, cpu=10.5, statements=6.5, server_tx=8.0, chain_ok=False)
    checks = by_target(postgres_checks(pg(good, bad), sqlite, CPUS, TARGETS))
    for name in (
        "statements per update @50 PostgreSQLx1",
        "transactions per update @50 PostgreSQLx1",
        "replica CPU per update vs SQLite @50 PostgreSQLx1",
        "audit chain intact @50 PostgreSQLx1",
        "0 lost / 0 duplicated @50 PostgreSQLx1",
        "ack p99 < 3 s @50 PostgreSQLx1",
    ):
        assert checks[name]["ok"], checks[name]
    assert checks["statements per update @50 PostgreSQLx3"]["detail"].startswith("6.5 at the rep")
    assert not checks["statements per update @50 PostgreSQLx3"]["ok"]
    tx = checks["transactions per update @50 PostgreSQLx3"]
    assert not tx["ok"] and "8.0 at the server, 4.0 opened by the replicas" in tx["detail"]
    assert not checks["replica CPU per update vs SQLite @50 PostgreSQLx3"]["ok"]
    assert not checks["audit chain intact @50 PostgreSQLx3"]["ok"]


def test_a_postgresql_level_without_its_sqlite_level_misses_the_cpu_comparison() -> None:
    checks = by_target(postgres_checks(pg(level(1, concurrency=10)), [], CPUS, TARGETS))
    check = checks["replica CPU per update vs SQLite @10 PostgreSQLx1"]
    assert not check["ok"] and "no SQLite level at this concurrency" in check["detail"]


def _op(n: int, kind: str) -> Op:
    op = Op(f"o{n}", kind, 0, "C0BENCH000", "tc-x", 16 if kind == "update" else None, "")  # type: ignore[arg-type]
    op.done_at = 1.0
    return op


def _outcome(updates: int, shows: int, *, app: float, server: float, xacts: int) -> LevelOutcome:
    ops = [_op(i, "update") for i in range(updates)] + [_op(i, "show") for i in range(shows)]
    outcome = LevelOutcome("postgres", 2, ops, wall_seconds=2.0, replicas=3)
    outcome.cpu_seconds = {
        "app": app,
        "driver": 0.5,
        "server": server,
        "server_background": 0.2,
        "others": 0.3,
    }
    outcome.counted = {"statements": 5.0 * updates + 2 * shows, "transactions": 4.0 * updates}
    outcome.server = {"transactions": xacts, "waits": {"CPU": 3, "IO:WALSync": 1}}
    outcome.chain = {"ok": True, "output": "9 entries, chain intact"}
    return outcome


def test_server_costs_per_update_leave_the_shows_out_at_their_calibrated_cost() -> None:
    show = pg_show_costs(_outcome(0, 4, app=0.02, server=0.008, xacts=4))
    assert show["server_cpu_ms"] == 2.0 and show["server_transactions"] == 1.0
    # 10 updates + 2 shows: 64 ms of the server's backends, 42 transactions at the server
    entry = pg_level_entry(_outcome(10, 2, app=0.11, server=0.064, xacts=42), show)
    assert entry["server_cpu_ms_per_update"] == approx(6.0)  # (64 - 2 x 2) / 10
    assert entry["server_transactions_per_update"] == approx(4.0)  # (42 - 2 x 1) / 10
    assert entry["cpu_ms_per_update"] == approx(10.0)  # (110 - 2 x 5 (20 ms / 4 shows)) / 10
    assert entry["total_cpu_ms_per_update"] == approx(16.0)
    assert entry["background_cpu_ms_per_update"] == approx(20.0)  # 200 ms / 10 updates
    assert entry["cores"]["bench"] == approx((0.11 + 0.064 + 0.5) / 2.0)
    assert entry["waits"] == {"CPU": 0.75, "IO:WALSync": 0.25}
    assert entry["replicas"] == 3 and entry["chain"]["ok"]
