"""Statistics, target checks, and the outputs: a Markdown table (stdout and
``results.md``), ``results.json`` and the ``latency.png`` plot."""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.load import AppName, LevelOutcome

MB = 1024 * 1024


@dataclass(frozen=True)
class Targets:
    ack_ratio: float = 1.3  # gpuops ack p99 ≤ this times the bare Bolt app's …
    ack_ratio_at: tuple[tuple[int, float], ...] = ((1, 1.0), (10, 1.0))  # … or these
    ack_p99_max: float = 3.0  # seconds: Slack's ack deadline
    summary_overhead_p50: float = 0.015  # seconds above the provider's simulated latency …
    overhead_levels: tuple[int, ...] = (1,)  # … at these concurrency levels
    provider_latency: float = 0.0  # seconds the simulators add to each call (none here)
    provider_calls_per_update: int = 2  # GET the cluster, PUT the change
    top_level_updates: int = 1000  # updates at the highest level, with 0 lost / duplicated
    peak_rss_mb: float = 150.0
    ready_seconds: float = 2.0
    busy_cores: float = 0.25  # other processes' CPU during a level above this: flagged
    # a level whose reference workload took this much longer than the run's fastest: flagged
    slow_machine: float = 0.2
    cpu_ms_per_update: float = 8.0  # gpuops CPU per update (shows left out) …
    cpu_levels: tuple[int, ...] = (10,)  # … at these concurrency levels
    # per scale-up (shows left out), at every level: exact counts from gpuops's /metrics
    statements_per_update: float = 6
    transactions_per_update: float = 4
    slack_calls_per_update: float = 5
    # PostgreSQL (bench.pg_report), per update, shows left out: statements counted at the
    # replicas, transactions at the server (pg_stat_database)
    pg_statements_per_update: float = 6
    pg_transactions_per_update: float = 4
    pg_cpu_vs_sqlite: float = 1.3  # replicas' CPU per update ≤ this x SQLite's, same level
    pg_scaling_level: int = 50  # at this concurrency, 3 replicas against 1:
    pg_scaling_replicas: tuple[int, int] = (1, 3)
    pg_scaling_throughput: float = 2.5  # updates/s ≥ this x …
    pg_scaling_cpu: float = 1.2  # … with CPU per update (replicas + server) ≤ this x
    # The throughput target is "not measurable here" when the bench's own processes kept
    # at least this share of the machine's cores busy in the level with more replicas.
    saturated_share: float = 0.9

    def ack_ratio_for(self, concurrency: int) -> float:
        return dict(self.ack_ratio_at).get(concurrency, self.ack_ratio)


COSTS = ("statements", "transactions", "slack_calls")  # counted on /metrics per level


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


def per_show(shows: LevelOutcome | None) -> dict[str, float | None]:
    """What one show cost in the calibration run (shows alone): CPU ms and each count."""
    n = shows.count("show") if shows is not None else 0
    if shows is None or not n:
        return {"cpu_ms": None, **dict.fromkeys(COSTS)}
    counted = {k: shows.counted.get(k) for k in COSTS}
    return {
        "cpu_ms": shows.cpu_seconds.get("app", 0.0) * 1000 / n,
        **{k: None if v is None else v / n for k, v in counted.items()},
    }


def per_update(outcome: LevelOutcome, show: dict[str, float | None]) -> dict[str, float | None]:
    """A level's costs per update: its totals less its shows' (at the calibrated cost of
    a show), over its updates."""
    updates, shows = outcome.count("update"), outcome.count("show")
    totals: dict[str, float | None] = {"cpu_ms": outcome.cpu_seconds.get("app", 0.0) * 1000}
    totals.update({k: outcome.counted.get(k) for k in COSTS})
    costs: dict[str, float | None] = {}
    for key, total in totals.items():
        if total is None or not updates:
            costs[key] = None
            continue
        shown = (show.get(key) or 0.0) * shows
        costs[key] = max(0.0, total - shown) / updates
    return {
        "cpu_ms_per_update": costs["cpu_ms"],
        "statements_per_update": costs["statements"],
        "transactions_per_update": costs["transactions"],
        "slack_calls_per_update": costs["slack_calls"],
    }


def app_entry(outcome: LevelOutcome, show: dict[str, float | None]) -> dict[str, Any]:
    """One gpuops build's figures at one level."""
    lost = outcome.lost()
    updates = outcome.count("update")
    wall = outcome.wall_seconds
    return {
        "commands": len(outcome.ops),
        "updates": updates,
        "shows": outcome.count("show"),
        "not_sent": outcome.not_sent,
        "ack": summarize(outcome.acks),
        "ack_errors": outcome.ack_errors,
        "summary": summarize(outcome.latencies("update")),
        "show_answer": summarize(outcome.latencies("show")),
        "lost": len(lost),
        "refused": sum(1 for op in lost if op.refused),
        "duplicated": len(outcome.duplicated()),
        "puts": sum(outcome.puts.values()),
        "unmatched_puts": outcome.unmatched_puts,
        "wall_seconds": wall,
        "updates_per_second": updates / wall if wall else 0.0,
        "cpu_seconds": outcome.cpu_seconds,
        "counted": outcome.counted,
        **per_update(outcome, show),
        "others_cores": _cores(outcome, "others"),
        "reference_ms": outcome.reference_ms,
        "app_cores": _cores(outcome, "app"),
        "driver_lag": summarize(outcome.driver_lag),
        "lost_examples": [
            {"op": op.id, "refused": op.refused, "notes": op.notes[-3:]} for op in lost[:5]
        ],
    }


def _ratio(app: dict[str, Any], bare: dict[str, Any]) -> float | None:
    p99, bare_p99 = app["ack"]["p99"], bare["ack"]["p99"]
    return None if p99 is None or not bare_p99 else float(p99) / float(bare_p99)


def level_entry(
    outcomes: Mapping[AppName, LevelOutcome], shows: Mapping[AppName, dict[str, float | None]]
) -> dict[str, Any]:
    gpuops, bare = outcomes["gpuops"], outcomes["bare"]
    bare_entry = {
        "commands": len(bare.ops),
        "not_sent": bare.not_sent,
        "ack": summarize(bare.acks),
        "ack_errors": bare.ack_errors,
        "wall_seconds": bare.wall_seconds,
        "cpu_seconds": bare.cpu_seconds,
        "others_cores": _cores(bare, "others"),
        "reference_ms": bare.reference_ms,
        "driver_lag": summarize(bare.driver_lag),
    }
    entry: dict[str, Any] = {
        "concurrency": gpuops.concurrency,
        "gpuops": app_entry(gpuops, shows["gpuops"]),
        "bare": bare_entry,
        "attempts": gpuops.attempts,
    }
    entry["ack_p99_ratio"] = _ratio(entry["gpuops"], bare_entry)
    if "compare" in outcomes:
        entry["compare"] = app_entry(outcomes["compare"], shows["compare"])
        entry["compare_ack_p99_ratio"] = _ratio(entry["compare"], bare_entry)
    return entry


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
        limit = targets.ack_ratio_for(c)
        add(
            f"ack p99 ratio @{c}",
            ratio is not None and ratio <= limit,
            f"{_ms(p99)} vs bare {_ms(bare_p99)} = {_x(ratio)} (≤ {limit:g}x)",
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
        if c in targets.cpu_levels:
            cpu = g["cpu_ms_per_update"]
            add(
                f"CPU per update @{c}",
                cpu is not None and cpu <= targets.cpu_ms_per_update,
                f"{_num(cpu)} ms (≤ {targets.cpu_ms_per_update:g} ms; shows left out)",
            )
        for name, key, limit in (
            ("statements", "statements_per_update", targets.statements_per_update),
            ("transactions", "transactions_per_update", targets.transactions_per_update),
            ("Slack calls", "slack_calls_per_update", targets.slack_calls_per_update),
        ):
            value = g[key]
            add(
                f"{name} per update @{c}",
                value is not None and value <= limit,
                f"{_num(value)} (≤ {limit:g}; shows left out)",
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
    levels: Sequence[Mapping[AppName, LevelOutcome]],
    shows: Mapping[AppName, LevelOutcome],
    ready_seconds: Mapping[AppName, float],
    peak_rss_bytes: Mapping[AppName, int],
    config: dict[str, Any],
    targets: Targets,
) -> dict[str, Any]:
    """The report of a run: ``levels`` holds each level's outcome per app ("gpuops",
    "bare", and "compare" when another build was measured beside), ``shows`` the
    calibration run of shows alone per gpuops build."""
    show_costs = {app: per_show(outcome) for app, outcome in shows.items()}
    report: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": config,
        "targets": asdict(targets),
        "ready_seconds": ready_seconds["gpuops"],
        "bare_ready_seconds": ready_seconds["bare"],
        "peak_rss_mb": peak_rss_bytes["gpuops"] / MB,
        "show_costs": show_costs,
        "levels": [level_entry(outcomes, show_costs) for outcomes in levels],
    }
    if "compare" in ready_seconds:
        report["compare"] = {
            "gpuops": config.get("compare_gpuops"),
            "ready_seconds": ready_seconds["compare"],
            "peak_rss_mb": peak_rss_bytes.get("compare", 0) / MB,
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


def _num(value: float | int | None) -> str:
    return "—" if value is None else f"{value:.1f}"


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


def slow_levels(report: dict[str, Any]) -> list[str]:
    """Levels run while the machine itself was slow: the reference workload took more than
    ``slow_machine`` longer than the fastest it took in this run (no other process need be
    busy for that: a neighbour on the host slows this machine down as a whole)."""
    measured = [
        (lv["concurrency"], app, lv[app]["reference_ms"])
        for lv in report["levels"]
        for app in ("gpuops", "compare", "bare")
        if app in lv and lv[app].get("reference_ms") is not None
    ]
    if not measured:
        return []
    fastest = min(ms for _, _, ms in measured)
    limit = fastest * (1 + report["targets"]["slow_machine"])
    return [
        f"{app} @{concurrency}: {ms:.2f} ms ({ms / fastest - 1:+.0%})"
        for concurrency, app, ms in measured
        if ms > limit
    ]


def _speed(entry: dict[str, Any]) -> str:
    ms = entry.get("reference_ms")
    return "—" if ms is None else f"{ms:.2f}"


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
        " machine, in cores. *ref*: CPU ms the driver's fixed reference workload took just"
        " before and after the level, on average (more: the machine was slower then).",
        "",
        "Per update (shows left out, at the cost of a show measured alone): *CPU*: CPU ms of"
        " the gpuops process and its children; *stmts*, *tx*, *Slack*: SQL statements,"
        " transactions and HTTP calls to Slack, from gpuops's /metrics counters. One show: "
        + _show_cost(report["show_costs"]["gpuops"])
        + ".",
        "",
        "| conc. | cmds | ack p50 | ack p99 | bare p50 | bare p99 | p99 ratio | summary p50 "
        "| summary p99 | show p50 | updates/s | lost | dup | CPU | stmts | tx | Slack "
        "| gpuops cores | lag p99 g/b | others g/b | ref g/b |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
        "|---:|---:|---:|---:|",
    ]
    for lv in report["levels"]:
        g, b = lv["gpuops"], lv["bare"]
        lines.append(
            f"| {lv['concurrency']} | {g['commands']} | {_n(g['ack']['p50'])} "
            f"| {_n(g['ack']['p99'])} | {_n(b['ack']['p50'])} | {_n(b['ack']['p99'])} "
            f"| {_x(lv['ack_p99_ratio'])} | {_n(g['summary']['p50'])} "
            f"| {_n(g['summary']['p99'])} | {_n(g['show_answer']['p50'])} "
            f"| {g['updates_per_second']:.1f} | {g['lost']} | {g['duplicated']} "
            f"| {_costs(g)} | {g['app_cores']:.2f} "
            f"| {_n(g['driver_lag']['p99'])}/{_n(b['driver_lag']['p99'])} "
            f"| {g['others_cores']:.2f}/{b['others_cores']:.2f} "
            f"| {_speed(g)}/{_speed(b)} |"
        )
    if "compare" in report:
        lines += ["", *compare_table(report)]
    if "postgres" in report:
        from bench.pg_report import markdown as pg_markdown  # it builds on this module

        lines += ["", *pg_markdown(report["postgres"])]
    lines += ["", "| target | result | measured |", "|---|---|---|"]
    for check in report["checks"]:
        lines.append(f"| {check['target']} | {verdict(check)} | {check['detail']} |")
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
    slow = slow_levels(report)
    if slow:
        lines += [
            "",
            "The machine itself was slow during: " + "; ".join(slow) + " (the reference"
            " workload, against the fastest of this run; flagged above"
            f" {report['targets']['slow_machine']:.0%}). CPU and latency figures measured then"
            " are that much higher; rerun to compare.",
        ]
    lines.append("")
    return "\n".join(lines)


def verdict(check: dict[str, Any]) -> str:
    """A check's result as the table shows it."""
    if check.get("not_measurable"):
        return "not measurable here"
    return "ok" if check["ok"] else "**MISSED**"


def _costs(entry: dict[str, Any]) -> str:
    return " | ".join(
        _num(entry[key])
        for key in (
            "cpu_ms_per_update",
            "statements_per_update",
            "transactions_per_update",
            "slack_calls_per_update",
        )
    )


def _show_cost(cost: dict[str, float | None]) -> str:
    return (
        f"{_num(cost['cpu_ms'])} CPU ms, {_num(cost['statements'])} statements, "
        f"{_num(cost['transactions'])} transactions, {_num(cost['slack_calls'])} Slack calls"
    )


def compare_table(report: dict[str, Any]) -> list[str]:
    """The other build (``--compare-gpuops``) and this one side by side, level by level,
    measured in the same run (each level against one, then the other)."""
    other = report["compare"]
    lines = [
        f"Side by side, same run: **compare** = `{other['gpuops']}` (ready "
        f"{other['ready_seconds']:.2f} s, peak RSS {other['peak_rss_mb']:.1f} MB), **gpuops** ="
        " this checkout. One show of compare: " + _show_cost(report["show_costs"]["compare"]) + ".",
        "",
        "| conc. | ack p99 compare | ack p99 gpuops | ratio compare | ratio gpuops "
        "| summary p50 compare | gpuops | updates/s compare | gpuops | CPU ms/update compare "
        "| gpuops | stmts compare | gpuops | tx compare | gpuops | Slack compare | gpuops "
        "| lost/dup compare | gpuops |",
        "|---:" * 19 + "|",
    ]
    for lv in report["levels"]:
        c, g = lv["compare"], lv["gpuops"]
        pairs = [
            (_n(c["ack"]["p99"]), _n(g["ack"]["p99"])),
            (_x(lv["compare_ack_p99_ratio"]), _x(lv["ack_p99_ratio"])),
            (_n(c["summary"]["p50"]), _n(g["summary"]["p50"])),
            (f"{c['updates_per_second']:.1f}", f"{g['updates_per_second']:.1f}"),
            *(
                (_num(c[key]), _num(g[key]))
                for key in (
                    "cpu_ms_per_update",
                    "statements_per_update",
                    "transactions_per_update",
                    "slack_calls_per_update",
                )
            ),
            (f"{c['lost']}/{c['duplicated']}", f"{g['lost']}/{g['duplicated']}"),
        ]
        cells = " | ".join(f"{a} | {b}" for a, b in pairs)
        lines.append(f"| {lv['concurrency']} | {cells} |")
    return lines


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
    shown = [("gpuops", "tab:blue"), ("bare", "tab:gray")]
    if "compare" in report:
        shown.append(("compare", "tab:orange"))
    for app, color in shown:
        name = "bare Bolt" if app == "bare" else app
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
