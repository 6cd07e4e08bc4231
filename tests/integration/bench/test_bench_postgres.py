"""``make bench``'s PostgreSQL levels end to end at concurrency 2: a database of the bench's
own per replica count, 1 and 3 ``gpuops serve`` replicas on it with the load round-robin,
the server's figures (transactions, backends' CPU, waits), the chain check after each
level, the targets (the scaling one at this level), the table, and the databases dropped."""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg

from bench.driver import BenchConfig, run_benchmark
from bench.postgres import ADMIN_DSN
from bench.report import Targets, write


async def test_postgresql_levels_with_1_and_3_replicas_run_end_to_end(tmp_path: Path) -> None:
    config = BenchConfig(
        levels=(2,),
        ops={2: 10},
        warmup_ops=1,
        settle_seconds=0.1,
        op_deadline=20.0,
        wall_deadline=60.0,
        max_attempts=1,
        calibration_shows=2,
        pg_replicas=(1, 3),
        pg_levels=(2,),
        targets=Targets(pg_scaling_level=2),
        # Not the 10.5 s that makes the server's transaction counts exact: here only > 0.
        pg_stats_wait=1.0,
    )
    report = await run_benchmark(config, log=lambda *_: None)

    pg = report["postgres"]
    assert pg["server_version"] and "the replicas" in pg["statements_at"]
    assert [g["replicas"] for g in pg["groups"]] == [1, 3]
    for group in pg["groups"]:
        assert len(group["ready_seconds"]) == group["replicas"] == len(group["peak_rss_mb"])
        assert group["show_costs"]["server_transactions"] > 0
        [lv] = group["levels"]
        assert (lv["updates"], lv["shows"], lv["lost"], lv["duplicated"]) == (8, 2, 0, 0)
        assert lv["puts"] == 8 and lv["summary"]["n"] == 8 and lv["ack_errors"] == 0
        assert lv["chain"]["ok"] and lv["chain"]["output"].endswith("entries, chain intact")
        server = lv["server"]
        assert server["commits"] > 0 and server["backends_seen"] >= group["replicas"]
        # waits are sampled: a quick level may catch no backend waiting, so only their form
        assert server["samples"] > 0 and all(n > 0 for n in server["waits"].values())
        for key in (
            "cpu_ms_per_update",
            "server_cpu_ms_per_update",
            "statements_per_update",
            "transactions_per_update",
            "server_transactions_per_update",
        ):
            assert isinstance(lv[key], float) and lv[key] > 0, (key, lv[key])
        assert lv["cores"]["bench"] > 0 and lv["updates_per_second"] > 0
    checks = {c["target"]: c for c in report["checks"]}
    for replicas in (1, 3):
        where = f"@2 PostgreSQLx{replicas}"
        assert checks[f"audit chain intact {where}"]["ok"]
        assert checks[f"0 lost / 0 duplicated {where}"]["ok"]
        assert f"statements per update {where}" in checks
        assert f"transactions per update {where}" in checks
        assert checks[f"replica CPU per update vs SQLite {where}"]["detail"].endswith("x)")
    assert {"updates/s 3 vs 1 replicas @2", "CPU per update 3 vs 1 replicas @2"} <= set(checks)

    conn = await asyncpg.connect(ADMIN_DSN)
    try:
        names = [g["database"] for g in pg["groups"]]
        left = await conn.fetch("SELECT datname FROM pg_database WHERE datname = ANY($1)", names)
    finally:
        await conn.close()
    assert left == []  # dropped

    text = write(report, tmp_path, with_plot=False)
    assert "| 1 | 2 | 10 |" in text and "| 3 | 2 | 10 |" in text and "intact |" in text
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["postgres"]["groups"][1]["levels"][0]["replicas"] == 3
