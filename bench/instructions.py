"""``python -m bench.instructions``: instructions per scale-up, counted, not timed.

This machine's speed moves by ±40% within minutes, more than most changes do, so CPU
milliseconds from two runs rarely tell which build is cheaper. valgrind's callgrind counts
the instructions a process executes: the same build, inputs and environment give the same
count whatever else the machine is doing. Each workload of ``bench/workloads.py`` runs
twice under callgrind, with few and with many scale-ups; the difference divided by the
difference in scale-ups is the cost of one, start-up left out.

    python -m bench.instructions [--workloads core,stack] [--counts 20,80]
                                 [--compare /other/checkout]

``--compare`` counts another checkout too (its own ``.venv``, the same workload script).
Runs two processes at a time; about 5 minutes for both workloads of one build.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
WORKLOAD_SCRIPT = Path(__file__).resolve().with_name("workloads.py")
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


@dataclass(frozen=True)
class Build:
    name: str
    checkout: Path

    @property
    def python(self) -> Path:
        return self.checkout / ".venv" / "bin" / "python"


@dataclass(frozen=True)
class Count:
    build: str
    workload: str
    per_update: float  # instructions
    startup: float  # instructions, with the few scale-ups


def parse_refs(valgrind_output: str) -> int:
    """The total instruction count valgrind printed (``I refs: 6,070,042,787``)."""
    found = _REFS.search(valgrind_output)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{valgrind_output[-2000:]}")
    return int(found.group(1).replace(",", ""))


def per_update(few: tuple[int, int], many: tuple[int, int]) -> float:
    """Instructions of one scale-up from two runs, each (scale-ups, instructions)."""
    (n_few, i_few), (n_many, i_many) = few, many
    if n_many <= n_few:
        raise ValueError("the second run needs more scale-ups than the first")
    return (i_many - i_few) / (n_many - n_few)


async def _callgrind(build: Build, workload: str, times: int) -> int:
    env = {
        **os.environ,
        "PYTHONPATH": str(build.checkout),
        "PYTHONHASHSEED": "0",  # the same dict and set layouts in every run
    }
    process = await asyncio.create_subprocess_exec(
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        str(build.python),
        str(WORKLOAD_SCRIPT),
        workload,
        str(times),
        cwd=build.checkout,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    text = output.decode(errors="replace")
    if process.returncode != 0:
        raise RuntimeError(f"{build.name} {workload} {times} failed:\n{text[-2000:]}")
    return parse_refs(text)


async def count(build: Build, workload: str, counts: tuple[int, int]) -> Count:
    few, many = counts
    refs = await asyncio.gather(_callgrind(build, workload, few), _callgrind(build, workload, many))
    cost = per_update((few, refs[0]), (many, refs[1]))
    return Count(build.name, workload, cost, refs[0] - cost * few)


def report(counts: list[Count]) -> str:
    lines = [
        "| build | workload | M instructions per scale-up | M instructions to start (+ few) |",
        "|---|---|---:|---:|",
    ]
    lines += [
        f"| {c.build} | {c.workload} | {c.per_update / 1e6:.2f} | {c.startup / 1e6:.0f} |"
        for c in counts
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("--workloads", default="core,stack")
    parser.add_argument("--counts", default="20,80", help="scale-ups in the two runs")
    parser.add_argument("--compare", type=Path, help="another checkout, with a .venv")
    return parser.parse_args(argv)


async def _run(args: argparse.Namespace) -> list[Count]:
    builds = [Build("this checkout", REPO_ROOT)]
    if args.compare is not None:
        builds.append(Build(str(args.compare), args.compare.resolve()))
    few, many = (int(n) for n in args.counts.split(","))
    return [
        await count(build, workload, (few, many))
        for workload in args.workloads.split(",")
        for build in builds
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed", file=sys.stderr)
        return 2
    print(report(asyncio.run(_run(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
