"""Statistics, target checks, and the outputs: a Markdown table (stdout and
``results.md``), ``results.json`` and the ``latency.png`` plot."""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.load import LevelOutcome

MB = 1024 * 1024


@dataclass(frozen=True)
class Targets:
    ack_ratio: float = 1.3  # gpuops ack p99 ≤ this times the bare Bolt app's, at every level
    ack_p99_max: float = 3.0  # seconds: Slack's ack deadline
    summary_overhead_p50: float = 0.025  # seconds above the provider's simulated latency …
    overhead_levels: tuple[int, ...] = (1,)  # … at these concurrency levels
    provider_latency: float = 0.0  # seconds the simulators add to each call (none here)
    provider_calls_per_update: int = 2  # GET the cluster, PUT the change
    top_level_updates: int = 1000  # updates at the highest level, with 0 lost / duplicated
    peak_rss_mb: float = 150.0
    ready_seconds: float = 2.0
    busy_cores: float = 0.25  # other processes' CPU during a level above this: flagged


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100), linear between closest ranks; None without data."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(values: Sequence[float]) -> dict[str, float | int | None]:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
    }


def level_entry(gpuops: LevelOutcome, bare: LevelOutcome) -> dict[str, Any]:
    ack = summarize(gpuops.acks)
    bare_ack = summarize(bare.acks)
    ratio = None
    if ack["p99"] is not None and bare_ack["p99"]:
        ratio = float(ack["p99"]) / float(bare_ack["p99"])
    lost = gpuops.lost()
    updates = gpuops.count("update")
    return {
        "concurrency": gpuops.concurrency,
        "gpuops": {
            "commands": len(gpuops.ops),
            "updates": updates,
            "shows": gpuops.count("show"),
            "not_sent": gpuops.not_sent,
            "ack": ack,
            "ack_errors": gpuops.ack_errors,
            "summary": summarize(gpuops.latencies("update")),
            "show_answer": summarize(gpuops.latencies("show")),
            "lost": len(lost),
            "refused": sum(1 for op in lost if op.refused),
            "duplicated": len(gpuops.duplicated()),
            "puts": sum(gpuops.puts.values()),
            "unmatched_puts": gpuops.unmatched_puts,
            "wall_seconds": gpuops.wall_seconds,
            "updates_per_second": updates / gpuops.wall_seconds if gpuops.wall_seconds else 0.0,
            "cpu_seconds": gpuops.cpu_seconds,
            "others_cores": _cores(gpuops, "others"),
            "app_cores": _cores(gpuops, "app"),
            "driver_lag": summarize(gpuops.driver_lag),
            "lost_examples": [
                {"op": op.id, "refused": op.refused, "notes": op.notes[-3:]} for op in lost[:5]
            ],
        },
        "bare": {
            "commands": len(bare.ops),
            "not_sent": bare.not_sent,
            "ack": bare_ack,
            "ack_errors": bare.ack_errors,
            "wall_seconds": bare.wall_seconds,
            "cpu_seconds": bare.cpu_seconds,
            "others_cores": _cores(bare, "others"),
            "driver_lag": summarize(bare.driver_lag),
        },
        "ack_p99_ratio": ratio,
        "attempts": gpuops.attempts,
    }


def _cores(outcome: LevelOutcome, who: str) -> float:
    """CPU used by ``who`` during the level, in cores (CPU seconds / wall seconds)."""
    if not outcome.wall_seconds:
        return 0.0
    return outcome.cpu_seconds.get(who, 0.0) / outcome.wall_seconds


def check_targets(report: dict[str, Any], targets: Targets) -> list[dict[str, Any]]:
    """Every target with its measured value and whether it was met."""
    checks: list[dict[str, Any]] = []

    def add(name: str, ok: bool, detail: str) -> None:
        checks.append({"target": name, "ok": ok, "detail": detail})

    ready = report["ready_seconds"]
    add("ready", ready <= targets.ready_seconds, f"{ready:.2f} s (≤ {targets.ready_seconds:g} s)")
    rss = report["peak_rss_mb"]
    add("peak RSS", rss <= targets.peak_rss_mb, f"{rss:.1f} MB (≤ {targets.peak_rss_mb:g} MB)")
    levels = report["levels"]
    top = max((lv["concurrency"] for lv in levels), default=0)
    for lv in levels:
        c, g = lv["concurrency"], lv["gpuops"]
        p99, ratio = g["ack"]["p99"], lv["ack_p99_ratio"]
        bare_p99 = lv["bare"]["ack"]["p99"]
        add(
            f"ack p99 ratio @{c}",
            ratio is not None and ratio <= targets.ack_ratio,
            f"{_ms(p99)} vs bare {_ms(bare_p99)} = {_x(ratio)} (≤ {targets.ack_ratio:g}x)",
        )
        add(
            f"ack p99 < {targets.ack_p99_max:g} s @{c}",
            p99 is not None and p99 < targets.ack_p99_max and g["ack_errors"] == 0,
            f"{_ms(p99)}, {g['ack_errors']} non-200",
        )
        add(
            f"0 lost / 0 duplicated @{c}",
            g["lost"] == 0 and g["duplicated"] == 0 and g["unmatched_puts"] == 0,
            f"{g['lost']} lost ({g['refused']} refused), {g['duplicated']} duplicated, "
            f"{g['unmatched_puts']} stray PUTs, of {g['updates']} updates + {g['shows']} shows",
        )
        if c in targets.overhead_levels:
            p50 = g["summary"]["p50"]
            provider = targets.provider_latency * targets.provider_calls_per_update
            overhead = None if p50 is None else p50 - provider
            add(
                f"command→summary overhead p50 @{c}",
                overhead is not None and overhead <= targets.summary_overhead_p50,
                f"{_ms(overhead)} (≤ {targets.summary_overhead_p50 * 1000:g} ms)",
            )
        if c == top:
            add(
                f"{targets.top_level_updates} updates @{c}",
                g["updates"] >= targets.top_level_updates and g["not_sent"] == 0,
                f"{g['updates']} updates sent, {g['not_sent']} not sent (time limit)",
            )
    return checks


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
    }


def build_report(
    *,
    pairs: Sequence[tuple[LevelOutcome, LevelOutcome]],
    ready_seconds: float,
    bare_ready_seconds: float,
    peak_rss_bytes: int,
    config: dict[str, Any],
    targets: Targets,
) -> dict[str, Any]:
    report: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": config,
        "targets": asdict(targets),
        "ready_seconds": ready_seconds,
        "bare_ready_seconds": bare_ready_seconds,
        "peak_rss_mb": peak_rss_bytes / MB,
        "levels": [level_entry(gpuops, bare) for gpuops, bare in pairs],
    }
    report["checks"] = check_targets(report, targets)
    report["passed"] = all(c["ok"] for c in report["checks"])
    return report


def _ms(seconds: float | int | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.1f} ms"


def _x(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.2f}x"


def _n(value: float | int | None) -> str:
    return "—" if value is None else f"{value * 1000:.1f}"


def busy_levels(report: dict[str, Any]) -> list[str]:
    """Levels during which other processes used more than ``busy_cores`` of the machine."""
    limit = report["targets"]["busy_cores"]
    flagged = []
    for lv in report["levels"]:
        for app in ("gpuops", "bare"):
            cores = lv[app]["others_cores"]
            if cores > limit:
                flagged.append(f"{app} @{lv['concurrency']}: {cores:.2f} cores")
    return flagged


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    latency = report["targets"]["provider_latency"]
    lines = [
        "# gpuops load benchmark",
        "",
        f"{report['date']} · {m['cpus']} CPUs · Python {m['python']} · {m['platform']}",
        "",
        f"Time to ready (spawn → first 200 on /healthz): **{report['ready_seconds']:.2f} s** "
        f"(bare Bolt {report['bare_ready_seconds']:.2f} s). "
        f"Peak RSS of `gpuops serve` (with children): **{report['peak_rss_mb']:.1f} MB**. "
        f"Simulated provider latency: {latency * 1000:g} ms per call.",
        "",
        "Latencies in ms. *ack*: HTTP answer to `POST /slack/events`; *summary*: command sent →"
        " cluster summary posted in the request's thread (updates); *show*: command → the"
        " `/gpu show` answer. *lag*: how late the driver's own event loop ran (it inflates"
        " every latency it measures). *others*: CPU used meanwhile by other processes on the"
        " machine, in cores.",
        "",
        "| conc. | cmds | ack p50 | ack p99 | bare p50 | bare p99 | p99 ratio | summary p50 "
        "| summary p99 | show p50 | updates/s | lost | dup | gpuops CPU | lag p99 g/b "
        "| others g/b |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lv in report["levels"]:
        g, b = lv["gpuops"], lv["bare"]
        lines.append(
            f"| {lv['concurrency']} | {g['commands']} | {_n(g['ack']['p50'])} "
            f"| {_n(g['ack']['p99'])} | {_n(b['ack']['p50'])} | {_n(b['ack']['p99'])} "
            f"| {_x(lv['ack_p99_ratio'])} | {_n(g['summary']['p50'])} "
            f"| {_n(g['summary']['p99'])} | {_n(g['show_answer']['p50'])} "
            f"| {g['updates_per_second']:.1f} | {g['lost']} | {g['duplicated']} "
            f"| {g['app_cores']:.2f} | {_n(g['driver_lag']['p99'])}/{_n(b['driver_lag']['p99'])} "
            f"| {g['others_cores']:.2f}/{b['others_cores']:.2f} |"
        )
    lines += ["", "| target | result | measured |", "|---|---|---|"]
    for check in report["checks"]:
        lines.append(
            f"| {check['target']} | {'ok' if check['ok'] else '**MISSED**'} | {check['detail']} |"
        )
    retried = [f"@{lv['concurrency']}: {lv['attempts']}" for lv in report["levels"]]
    if any(lv["attempts"] > 1 for lv in report["levels"]):
        lines += [
            "",
            "Runs per level (a level is run again when other processes used more than "
            f"{report['targets']['busy_cores']:g} cores meanwhile; the quietest run is shown): "
            + ", ".join(retried)
            + ".",
        ]
    busy = busy_levels(report)
    if busy:
        lines += [
            "",
            "Other processes were busy during: " + "; ".join(busy) + ". Figures measured then"
            " include waiting for the CPU; rerun on a quiet machine to compare.",
        ]
    lines.append("")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    levels = report["levels"]
    xs = list(range(len(levels)))
    labels = [str(lv["concurrency"]) for lv in levels]

    def series(app: str, metric: str, q: str) -> list[float]:
        values = [lv[app][metric][q] for lv in levels]
        return [math.nan if v is None else v * 1000 for v in values]

    fig, (ack_ax, sum_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    for app, color in (("gpuops", "tab:blue"), ("bare", "tab:gray")):
        name = "gpuops" if app == "gpuops" else "bare Bolt"
        ack_ax.plot(xs, series(app, "ack", "p50"), "o-", color=color, label=f"{name} p50")
        ack_ax.plot(xs, series(app, "ack", "p99"), "s--", color=color, label=f"{name} p99")
    for x, lv in zip(xs, levels, strict=True):
        p99 = lv["gpuops"]["ack"]["p99"]
        if lv["ack_p99_ratio"] is not None and p99 is not None:
            ack_ax.annotate(
                _x(lv["ack_p99_ratio"]),
                (x, p99 * 1000),
                textcoords="offset points",
                xytext=(0, 8),
                ha="center",
                fontsize=8,
            )
    ack_ax.set_title("Ack latency (POST /slack/events); gpuops/bare p99 ratio")
    ack_ax.margins(y=0.12)
    sum_ax.plot(xs, series("gpuops", "summary", "p50"), "o-", color="tab:green", label="p50")
    sum_ax.plot(xs, series("gpuops", "summary", "p99"), "s--", color="tab:green", label="p99")
    sum_ax.set_title("Command → summary in thread (update)")
    for ax in (ack_ax, sum_ax):
        ax.set_xticks(xs, labels)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("ms")
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"gpuops load benchmark — {report['date']}, {report['machine']['cpus']} CPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(report: dict[str, Any], out_dir: Path, *, with_plot: bool = True) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    text = markdown(report)
    (out_dir / "results.md").write_text(text)
    (out_dir / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    if with_plot:
        plot(report, out_dir / "latency.png")
    return text
