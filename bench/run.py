"""``make bench``: the load benchmark of gpuops serve against a bare Bolt app.

    .venv/bin/python -m bench.run [--levels 1,10,50,200] [--ops 200=1250,...] [--out DIR]
        [--compare-gpuops /other/checkout | /other/venv/bin/gpuops]
        [--pg-replicas 1,3] [--pg-levels 10,50] [--pg-only]

Prints the table, writes ``results.md``, ``results.json`` and ``latency.png`` under
``bench/results/`` and exits 1 if a target was missed (each one is named).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from bench.driver import BenchConfig, run_benchmark
from bench.postgres import PostgresMissing
from bench.procs import NotReady
from bench.report import Targets, write

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def _ops(text: str) -> dict[int, int]:
    pairs = (item.split("=", 1) for item in text.split(",") if item.strip())
    return {int(level): int(count) for level, count in pairs}


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--levels", default="1,10,50,200", help="concurrency levels")
    parser.add_argument("--ops", default="", help="commands per level, e.g. 200=1250,50=625")
    parser.add_argument("--show-every", type=int, default=5, help="every n-th command a show")
    parser.add_argument(
        "--provider-latency", type=float, default=0.0, help="seconds added to each provider call"
    )
    parser.add_argument(
        "--watch-clusters",
        type=int,
        default=0,
        help="also watch together-prod grown to this many clusters (polled every 15 s)",
    )
    parser.add_argument(
        "--compare-gpuops",
        default=None,
        help="another build's gpuops script (or its checkout, with a .venv), measured beside "
        "this one in the same run; the report shows both",
    )
    parser.add_argument(
        "--attempts",
        type=int,
        default=3,
        help="runs of a level at most while other processes are busy (the quietest is kept)",
    )
    parser.add_argument(
        "--pg-replicas",
        default="1,3",
        help="replica counts on PostgreSQL, each on a database of its own ('': none)",
    )
    parser.add_argument("--pg-levels", default="10,50", help="concurrency levels on PostgreSQL")
    parser.add_argument(
        "--pg-only",
        action="store_true",
        help="the PostgreSQL levels and, for their comparison, SQLite at the same levels only",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-plot", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pg_levels = _ints(args.pg_levels)
    config = BenchConfig(
        levels=pg_levels if args.pg_only else _ints(args.levels),
        pg_replicas=_ints(args.pg_replicas),
        pg_levels=pg_levels,
        show_every=args.show_every,
        targets=Targets(provider_latency=args.provider_latency),
        watch_clusters=args.watch_clusters,
        compare_gpuops=args.compare_gpuops,
        max_attempts=args.attempts,
    )
    config.ops.update(_ops(args.ops))
    try:
        report = asyncio.run(run_benchmark(config))
    except PostgresMissing as exc:
        print(f"\nbench: {exc}", file=sys.stderr)
        return 1
    except NotReady as exc:  # nothing measured: say why rather than a traceback
        print(f"\nbench: not measurable here: {exc}", file=sys.stderr)
        return 1
    print()
    print(write(report, args.out, with_plot=not args.no_plot))
    written = "results.md, results.json" + ("" if args.no_plot else ", latency.png")
    print(f"written to {args.out}: {written}")
    missed = [c for c in report["checks"] if not c["ok"]]
    if missed:
        print(f"\n{len(missed)} target(s) missed:", file=sys.stderr)
        for check in missed:
            print(f"  MISSED {check['target']}: {check['detail']}", file=sys.stderr)
        return 1
    unmeasured = [c for c in report["checks"] if c.get("not_measurable")]
    for check in unmeasured:
        print(f"\nNOT MEASURABLE HERE {check['target']}: {check['detail']}")
    but = f", but {len(unmeasured)} not measurable here" if unmeasured else ""
    print(f"\nall targets met{but}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
