"""The instruction counter (``python -m bench.instructions``): its arithmetic, and its two
workloads run for real (without valgrind, which would take minutes), so that neither rots."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.instructions import REPO_ROOT, WORKLOAD_SCRIPT, Count, parse_refs, per_update, report


def test_the_count_is_read_from_valgrinds_summary() -> None:
    output = "==7258== Events    : Ir\n==7258== Collected : 6070042787\n==7258==\n"
    assert parse_refs(output + "==7258== I   refs:      6,070,042,787\n") == 6_070_042_787
    with pytest.raises(RuntimeError, match="no instruction count"):
        parse_refs("==1== ERROR SUMMARY: 0 errors\n")


def test_one_scale_up_is_the_difference_of_two_runs() -> None:
    assert per_update((20, 5_000_000_000), (80, 5_600_000_000)) == 10_000_000
    with pytest.raises(ValueError):
        per_update((80, 1), (20, 2))


def test_the_report_is_a_table_in_millions() -> None:
    table = report([Count("this checkout", "core", 8_770_000.0, 4_940_000_000.0)])
    assert table.splitlines()[-1] == "| this checkout | core | 8.77 | 4940 |"


@pytest.mark.parametrize("workload", ["core", "stack"])
def test_each_workload_runs_its_scale_ups(workload: str) -> None:
    """The same command the counter runs under valgrind; it fails on any error (a refused
    command, a summary that never comes)."""
    done = subprocess.run(  # noqa: S603 (our own script, our interpreter)
        [sys.executable, str(WORKLOAD_SCRIPT), workload, "1"],
        cwd=REPO_ROOT,
        env={"PYTHONPATH": str(REPO_ROOT), "PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
