"""``make bench-scale`` at tiny sizes (issue 34): every figure of each size is in scale.json,
the preloaded chain verifies, and the targets are judged (each named, met or missed)."""

from __future__ import annotations

import json
from pathlib import Path

from bench import scale
from bench.scale_report import HISTORY_FLAT


def test_bench_scale_runs_at_tiny_sizes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [
        "--sizes", "0,300",
        "--clusters", "10,30",
        "--open", "10,50",
        "--watch-every", "1",
        "--watch-rounds", "1",
        "--reps", "1",
        "--startup-runs", "1",
        "--out", str(out),
        "--workdir", str(tmp_path / "work"),
    ]  # fmt: skip
    code = scale.main(argv)
    report = json.loads((out / "scale.json").read_text())
    assert code in (0, 1)  # at these sizes a ratio says little; that it is judged does
    history = report["history"]
    assert set(history) == {"0", "300"}
    for size in history.values():
        assert set(HISTORY_FLAT) <= set(size["ops"])
        assert size["ops"]["update"]["statements"] > 0
        assert size["startup_cpu_s"] > 0
        assert size["audit"]["verify"]["exit"] == 0  # the preloaded chain is intact
    assert history["300"]["audit_entries"] == 900
    assert set(history["300"]["open"]) == {"10", "50"}
    assert set(report["clusters"]) == {"10", "30"}
    assert report["clusters"]["30"]["snapshot_refresh"]["per_cluster_ms"] > 0
    watcher = report["watcher"]
    assert watcher["clusters"] == 30 and watcher["calls_per_round"]
    assert report["checks"] and all({"target", "ok", "detail"} <= set(c) for c in report["checks"])
