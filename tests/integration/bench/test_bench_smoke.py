"""The load benchmark (``make bench``) end to end at concurrency 2 for 10 commands, so that
its code cannot rot: gpuops serve and the bare Bolt app as subprocesses, signed commands,
results read at the FakeSlack, PUTs counted at the simulator, the report and the plot."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.deadlines import DeadlineConfig, run_deadlines
from bench.driver import BenchConfig, run_benchmark
from bench.report import write

COSTS = (
    "cpu_ms_per_update",
    "statements_per_update",
    "transactions_per_update",
    "slack_calls_per_update",
)


async def test_the_benchmark_runs_end_to_end_at_concurrency_2(tmp_path: Path) -> None:
    """Beside a second gpuops build to compare (this checkout's own script again)."""
    config = BenchConfig(
        levels=(2,),
        ops={2: 10},
        warmup_ops=1,
        settle_seconds=0.1,
        op_deadline=10.0,
        wall_deadline=30.0,
        max_attempts=1,
        calibration_shows=2,
        compare_gpuops=str(Path(sys.executable).parent / "gpuops"),
        pg_replicas=(),  # the PostgreSQL levels: tests/integration/bench/test_bench_postgres.py
    )
    report = await run_benchmark(config, log=lambda *_: None)

    [level] = report["levels"]
    gpuops, bare = level["gpuops"], level["bare"]
    assert (gpuops["commands"], gpuops["updates"], gpuops["shows"]) == (10, 8, 2)
    assert gpuops["ack"]["n"] == 10 and gpuops["ack_errors"] == 0
    assert gpuops["summary"]["n"] == 8 and gpuops["summary"]["p50"] > 0
    assert gpuops["show_answer"]["n"] == 2
    assert gpuops["lost"] == 0 and gpuops["duplicated"] == 0
    assert gpuops["puts"] == 8 and gpuops["unmatched_puts"] == 0  # one PUT per update
    assert bare["commands"] == 10 and bare["ack"]["n"] == 10 and bare["ack_errors"] == 0
    for build in (gpuops, level["compare"]):  # the figures the targets judge, shows left out
        assert all(isinstance(build[key], float) and build[key] > 0 for key in COSTS), build
        assert build["statements_per_update"] >= build["transactions_per_update"]
    assert level["compare"]["updates"] == 8 and level["compare"]["lost"] == 0
    for entry in (gpuops, level["compare"], bare):  # how fast the machine ran just before
        assert isinstance(entry["reference_ms"], float) and entry["reference_ms"] > 0
    assert level["compare_ack_p99_ratio"] > 0
    show = report["show_costs"]["gpuops"]
    assert show["statements"] is not None and show["slack_calls"] is not None
    assert level["ack_p99_ratio"] > 0 and level["attempts"] == 1
    assert 0 < report["ready_seconds"] < 60 and report["peak_rss_mb"] > 20
    checks = {c["target"]: c for c in report["checks"]}
    assert checks["0 lost / 0 duplicated @2"]["ok"]
    assert {"ready", "peak RSS", "ack p99 ratio @2", "1000 updates @2"} <= set(checks)
    assert {"statements per update @2", "Slack calls per update @2"} <= set(checks)
    assert not checks["1000 updates @2"]["ok"]  # 8 updates: the run reports it as missed
    assert "postgres" not in report  # left out on request (a missing server fails the run)

    text = write(report, tmp_path)
    assert "| 2 | 10 |" in text and "MISSED" in text and "Side by side, same run" in text
    assert "| ref g/b |" in text and f"| {gpuops['reference_ms']:.2f}/" in text
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["levels"][0]["gpuops"]["updates"] == 8
    assert set(COSTS) <= set(saved["levels"][0]["gpuops"])
    assert (tmp_path / "results.md").read_text() == text
    assert (tmp_path / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_the_deadline_scenarios_run_end_to_end() -> None:
    config = DeadlineConfig(
        forms=4, lists=1, submissions=2, provider_latency=0.2, group_latency=0.3
    )
    forms, submissions = await run_deadlines(config, log=lambda *_: None)

    assert forms.name == "command → views.open" and forms.target_seconds == 1.0
    assert len(forms.seconds) == 3 and all(0 < s < 1.0 for s in forms.seconds)
    assert forms.refused == [] and forms.notes["lists"] == 1 and forms.ok
    assert submissions.target_seconds == 2.5 and len(submissions.seconds) == 2
    assert submissions.notes["late"] == 0 and submissions.notes["puts"] == 2
    assert submissions.ok and "met" in submissions.summary()
