"""The figures of ``make bench-scale`` taken from child processes: ``gpuops serve``'s start-up
on a preloaded store, ``gpuops audit export`` / ``verify`` with their CPU and peak RSS (each
child's own ``ru_maxrss``, from ``os.wait4``), and watcher rounds at many clusters while
``/healthz`` and ``/metrics`` are probed from a thread of their own."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped]

from bench.procs import Child, clean_env, free_port, gpuops_command


def gpuops_script() -> list[str]:
    script = Path(sys.executable).parent / "gpuops"
    return [str(script)] if script.exists() else [sys.executable, "-m", "bot.cli"]


@dataclass(frozen=True)
class ChildRun:
    """One finished child: wall seconds, CPU seconds (user + system), peak RSS bytes."""

    wall: float
    cpu: float
    peak_rss: int
    code: int

    def as_json(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall, 3),
            "cpu_s": round(self.cpu, 3),
            "peak_rss_mb": round(self.peak_rss / 2**20, 1),
            "exit": self.code,
        }


# Forks ``argv`` from a small interpreter and writes the child's own rusage to a file. A
# child forked from the bench itself would report the bench's size as its peak: the pages
# it shares with its parent until exec count in its ``ru_maxrss``.
_LAUNCHER = """
import json, os, sys
out, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    os.execvp(argv[0], argv)
_, status, usage = os.wait4(pid, 0)
with open(out, "w") as f:
    json.dump({"code": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime,
               "maxrss_kib": usage.ru_maxrss}, f)
"""


def run_measured(argv: list[str], env: dict[str, str], cwd: Path) -> ChildRun:
    """Run ``argv`` to its end, stdout discarded: wall time, and its own CPU and peak RSS."""
    report = cwd / "rusage.json"
    started = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        subprocess.run(
            [sys.executable, "-c", _LAUNCHER, str(report), *argv],
            env=env,
            cwd=cwd,
            stdout=sink,
            stderr=subprocess.DEVNULL,
            check=True,
        )
    wall = time.perf_counter() - started
    usage = json.loads(report.read_text())
    # Linux reports ru_maxrss in KiB.
    return ChildRun(wall, usage["cpu"], usage["maxrss_kib"] * 1024, usage["code"])


def audit_runs(database_url: str, workdir: Path) -> dict[str, ChildRun]:
    """``gpuops audit export`` (JSON lines) and ``gpuops audit verify`` on the store."""
    env = clean_env({"GPUOPS_DATABASE_URL": database_url, "GPUOPS_LOG_LEVEL": "WARNING"})
    head = gpuops_script()
    return {
        "export": run_measured([*head, "audit", "export"], env, workdir),
        "verify": run_measured([*head, "audit", "verify"], env, workdir),
    }


@dataclass
class Startup:
    """The quickest start-up of one store, and every run's CPU seconds (in run order)."""

    wall: float = float("inf")
    cpu: float = float("inf")
    cpu_runs: list[float] = field(default_factory=list)


async def startups(
    envs: dict[str, dict[str, str]], workdir: Path, *, runs: int = 3
) -> dict[str, Startup]:
    """``gpuops serve``'s start-up on each store, interleaved (one of each, ``runs`` times
    round), so that every store meets the same machine: on a shared 2-core machine a start
    a few minutes later can cost 1.5x the CPU (imports under contention) with nothing of its
    own changed. The quickest run of each is kept."""
    found = {name: Startup() for name in envs}
    for run in range(runs):
        for name, env in envs.items():
            port = free_port()
            child = Child.spawn(
                f"startup-{name}-{run}", gpuops_command(port), clean_env(env), port, workdir
            )
            try:
                wall = await child.wait_ready(within=120.0)
                cpu = float(sum(psutil.Process(child.proc.pid).cpu_times()[:2]))
            finally:
                await child.stop()
            seen = found[name]
            seen.wall, seen.cpu = min(seen.wall, wall), min(seen.cpu, cpu)
            seen.cpu_runs.append(round(cpu, 3))
    return found


@dataclass
class Probe:
    """``/healthz`` and ``/metrics`` asked every ``every`` s from a thread (its own client,
    so the bench's loop is no part of the answer time); the slowest answers."""

    base_url: str
    every: float = 0.2
    worst: dict[str, float] = field(default_factory=lambda: {"healthz": 0.0, "metrics": 0.0})
    failed: int = 0
    asked: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(timeout=5.0) as client:
            while not self._stop.wait(self.every):
                for name in ("healthz", "metrics"):
                    started = time.perf_counter()
                    try:
                        ok = client.get(f"{self.base_url}/{name}").status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    took = time.perf_counter() - started
                    self.asked += 1
                    self.failed += 0 if ok else 1
                    self.worst[name] = max(self.worst[name], took)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


@dataclass
class Rounds:
    """Watcher rounds seen at the simulator: each begins with a list call and ends with the
    last provider call before the next one (the rest of the interval is idle)."""

    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    cpu: float = 0.0  # the child's CPU seconds from the first round's start to the next's


async def watch_rounds(
    calls_of: Callable[[], tuple[int, int]],
    rounds: int,
    cpu_of: Callable[[], float] = lambda: 0.0,
    *,
    sample: float = 0.05,
    within: float = 300.0,
) -> Rounds:
    """Sample ``calls_of()`` → (list calls, all calls) until ``rounds`` whole rounds were
    seen (the one under way when sampling began is left out)."""
    seen = Rounds()
    deadline = time.perf_counter() + within
    last_lists, last_total = calls_of()
    last_growth, round_calls, cpu_at_start = time.perf_counter(), 0, 0.0
    while time.perf_counter() < deadline:
        await asyncio.sleep(sample)
        lists, total = calls_of()
        now = time.perf_counter()
        if lists > last_lists:  # a round began: the one before ended at its last call
            if seen.starts:
                seen.ends.append(last_growth)
                seen.calls.append(round_calls)
                if len(seen.ends) >= rounds:
                    seen.cpu = cpu_of() - cpu_at_start
                    return seen
            else:
                cpu_at_start = cpu_of()
            seen.starts.append(now)
            round_calls, last_lists = 0, lists
        if total > last_total:
            round_calls += total - last_total
            last_total, last_growth = total, now
    raise RuntimeError(f"saw {len(seen.ends)} of {rounds} watcher rounds within {within} s")
