"""The benchmark report's judgement of the machine's own speed: a level run while the
reference workload took more than ``slow_machine`` longer than its fastest is named."""

from __future__ import annotations

from typing import Any

from bench.report import Targets, slow_levels


def report(references: dict[int, dict[str, float | None]]) -> dict[str, Any]:
    return {
        "targets": {"slow_machine": Targets().slow_machine},
        "levels": [
            {"concurrency": c, **{app: {"reference_ms": ms} for app, ms in apps.items()}}
            for c, apps in references.items()
        ],
    }


def test_a_level_run_while_the_machine_was_slow_is_named_with_how_much() -> None:
    flagged = slow_levels(
        report(
            {
                1: {"gpuops": 3.5, "bare": 3.6},
                10: {"gpuops": 4.4, "compare": 3.6, "bare": 3.5},  # 26% over 3.5
                50: {"gpuops": 4.1, "bare": 4.3},  # 17%: within the margin; 23%: over
            }
        )
    )
    assert flagged == ["gpuops @10: 4.40 ms (+26%)", "bare @50: 4.30 ms (+23%)"]


def test_a_steady_machine_or_a_build_without_the_measure_flags_nothing() -> None:
    assert slow_levels(report({1: {"gpuops": 3.5, "bare": 3.6}, 10: {"gpuops": 3.9}})) == []
    assert slow_levels(report({1: {"gpuops": None, "bare": None}})) == []
