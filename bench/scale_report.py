"""The targets of ``make bench-scale`` (each a ratio between sizes of the same run) and its
printed tables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.core.timeline import MAX_EVENTS

# What must not grow from the smallest history of at least 10k to the largest.
HISTORY_FLAT = (
    "update",
    "show",
    "list",
    "audit",
    "timeline_24h_quiet",
    "timeline_7d_quiet",
    "home_operator",
    "home_admin",
    "scheduler_tick",
    "sweeper_round",
)
# A notify channel's timeline holds every event of its window, which grows with history:
# its file lists at most the first MAX_EVENTS and counts the rest up to a bound, so from the
# smallest size whose window fills a file on, it must not grow. The window's events at a
# size: 3 audit entries per request, spread over a year (bench.scale_preload).
NOTIFY_BOUNDED = {"timeline_24h_notify": 1, "timeline_7d_notify": 7}  # the window, days
CLUSTER_FLAT = ("list_first", "list_last", "home_operator", "home_admin")
# A figure this small is within the clock's and the machine's noise: a ratio of two such
# figures says nothing, so the smaller one is taken to be at least this.
FLOOR_MS = 2.0


@dataclass(frozen=True)
class Targets:
    history_ratio: float = 1.5  # 10k → 1M
    audit_per_entry_ratio: float = 1.5  # export / verify CPU per entry, 100k → 1M: linear
    audit_rss_ratio: float = 1.2  # peak RSS, 100k → 1M: streamed
    startup_ratio: float = 1.5  # empty → 1M
    cluster_ratio: float = 3.0  # 10 → 1,000 clusters
    probe_seconds: float = 1.0  # /healthz and /metrics during watcher rounds


def _check(target: str, ok: bool, detail: str, *, measurable: bool = True) -> dict[str, Any]:
    check: dict[str, Any] = {"target": target, "ok": ok, "detail": detail}
    if not measurable:
        check["not_measurable"] = True
    return check


def _ratio(small: float, large: float) -> float:
    return max(large, FLOOR_MS) / max(small, FLOOR_MS)


def _history_checks(history: dict[str, Any], targets: Targets) -> list[dict[str, Any]]:
    sizes = sorted(int(s) for s in history)
    found: list[dict[str, Any]] = []
    base = [s for s in sizes if s >= 10_000]
    if len(base) >= 2:
        small, large = history[str(base[0])], history[str(base[-1])]
        for name in HISTORY_FLAT:
            a, b = small["ops"][name]["cpu_ms"], large["ops"][name]["cpu_ms"]
            ratio = _ratio(a, b)
            found.append(
                _check(
                    f"{name} CPU {base[0]:,} → {base[-1]:,} requests ≤ {targets.history_ratio}x",
                    ratio <= targets.history_ratio,
                    f"{a:.1f} → {b:.1f} ms ({ratio:.2f}x)",
                )
            )
    for name, days in NOTIFY_BOUNDED.items():
        full = [s for s in sizes if s * 3 * days / 365 >= MAX_EVENTS]
        target = f"{name} CPU ≤ {targets.history_ratio}x between sizes whose window fills a file"
        if len(full) < 2:
            found.append(
                _check(
                    target,
                    True,
                    f"not measurable at these sizes: {len(full)} of them hold ≥ {MAX_EVENTS:,} "
                    f"events in {days} d (a file's most)",
                    measurable=False,
                )
            )
            continue
        a, b = (
            history[str(full[0])]["ops"][name]["cpu_ms"],
            history[str(full[-1])]["ops"][name]["cpu_ms"],
        )
        ratio = _ratio(a, b)
        found.append(
            _check(
                f"{target} ({full[0]:,} → {full[-1]:,} requests)",
                ratio <= targets.history_ratio,
                f"{a:.1f} → {b:.1f} ms ({ratio:.2f}x)",
            )
        )
    audited = [s for s in sizes if s >= 100_000]
    if len(audited) >= 2:
        small, large = history[str(audited[0])], history[str(audited[-1])]
        for verb in ("export", "verify"):
            a, b = small["audit"][verb], large["audit"][verb]
            per_a = a["cpu_s"] / (small["audit_entries"] or 1)
            per_b = b["cpu_s"] / (large["audit_entries"] or 1)
            ratio = per_b / per_a if per_a else float("inf")
            found.append(
                _check(
                    f"audit {verb} CPU per entry {audited[0]:,} → {audited[-1]:,} "
                    f"≤ {targets.audit_per_entry_ratio}x (linear)",
                    ratio <= targets.audit_per_entry_ratio and a["exit"] == 0 and b["exit"] == 0,
                    f"{per_a * 1e6:.1f} → {per_b * 1e6:.1f} µs per entry ({ratio:.2f}x), "
                    f"exit {a['exit']} / {b['exit']}",
                )
            )
            rss = b["peak_rss_mb"] / a["peak_rss_mb"]
            found.append(
                _check(
                    f"audit {verb} peak RSS {audited[0]:,} → {audited[-1]:,} "
                    f"≤ {targets.audit_rss_ratio}x (streamed)",
                    rss <= targets.audit_rss_ratio,
                    f"{a['peak_rss_mb']:.0f} → {b['peak_rss_mb']:.0f} MB ({rss:.2f}x)",
                )
            )
    for size in sizes:
        for verb in ("export", "verify"):
            run = history[str(size)]["audit"][verb]
            if run["exit"] != 0:
                found.append(_check(f"audit {verb} at {size:,}", False, f"exit {run['exit']}"))
    if len(sizes) >= 2 and sizes[0] == 0:
        first, last = history["0"], history[str(sizes[-1])]
        a, b = first["startup_cpu_s"], last["startup_cpu_s"]
        found.append(
            _check(
                f"start-up CPU empty → {sizes[-1]:,} requests ≤ {targets.startup_ratio}x",
                b / a <= targets.startup_ratio,
                f"{a:.2f} → {b:.2f} s CPU ({b / a:.2f}x), the quickest of runs "
                f"{first.get('startup_cpu_runs', [])} / {last.get('startup_cpu_runs', [])} s "
                f"interleaved, load {first.get('startup_load', '?')}; wall "
                f"{first['startup_s']:.2f} → {last['startup_s']:.2f} s",
            )
        )
    return found


def _cluster_checks(clusters: dict[str, Any], targets: Targets) -> list[dict[str, Any]]:
    counts = sorted(int(c) for c in clusters)
    within = [c for c in counts if c <= 1_000]
    if len(within) < 2:
        return []
    small, large = clusters[str(within[0])], clusters[str(within[-1])]
    found = []
    for name in CLUSTER_FLAT:
        a, b = small[name]["cpu_ms"], large[name]["cpu_ms"]
        ratio = _ratio(a, b)
        found.append(
            _check(
                f"{name} CPU {within[0]:,} → {within[-1]:,} clusters ≤ {targets.cluster_ratio}x",
                ratio <= targets.cluster_ratio,
                f"{a:.1f} → {b:.1f} ms ({ratio:.2f}x)",
            )
        )
    return found


def _watcher_checks(watcher: dict[str, Any] | None, targets: Targets) -> list[dict[str, Any]]:
    if watcher is None:
        return []
    n, every = watcher["clusters"], watcher["every_s"]
    rounds, calls = watcher["round_s"], watcher["calls_per_round"]
    worst = max(watcher["healthz_worst_s"], watcher["metrics_worst_s"])
    return [
        _check(
            f"every watcher round at {n:,} clusters within its {every:g} s interval",
            bool(rounds) and max(rounds) < every,
            f"rounds {', '.join(f'{r:.1f}' for r in rounds)} s",
        ),
        _check(
            f"/healthz and /metrics within {targets.probe_seconds:g} s during the rounds",
            worst <= targets.probe_seconds and watcher["probe_failures"] == 0,
            f"slowest {worst:.3f} s, {watcher['probe_failures']} failed",
        ),
        _check(
            f"provider calls per round bounded (≤ {watcher['calls_bound']})",
            bool(calls) and max(calls) <= watcher["calls_bound"],
            f"{', '.join(str(c) for c in calls)} calls; "
            f"{watcher['cpu_per_cluster_ms']:.3f} ms CPU per cluster per round",
        ),
    ]


def checks(report: dict[str, Any], targets: Targets) -> list[dict[str, Any]]:
    return [
        *_history_checks(report["history"], targets),
        *_cluster_checks(report["clusters"], targets),
        *_watcher_checks(report["watcher"], targets),
    ]


def _rows(title: str, columns: list[str], rows: list[list[str]]) -> str:
    lines = [f"## {title}", "", "| " + " | ".join(columns) + " |"]
    lines.append("|" + "---|" * len(columns))
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _cell(figure: dict[str, float]) -> str:
    return f"{figure['cpu_ms']:.1f} / {figure['statements']:g}"


def _verdict(check: dict[str, Any]) -> str:
    if not check["ok"]:
        return "**MISSED**"
    return "not measurable here" if check.get("not_measurable") else "ok"


def table(report: dict[str, Any]) -> str:
    """The tables (Markdown), as docs/BENCHMARKS.md shows them."""
    parts = []
    history = report["history"]
    sizes = sorted(history, key=int)
    if sizes:
        names = list(history[sizes[0]]["ops"])
        columns = ["figure (CPU ms / statements)", *(f"{int(s):,}" for s in sizes)]
        rows = [[name, *(_cell(history[s]["ops"][name]) for s in sizes)] for name in names]
        rows.append(
            [
                "start-up (wall s / CPU s)",
                *(
                    f"{history[s]['startup_s']:.2f} / {history[s]['startup_cpu_s']:.2f}"
                    for s in sizes
                ),
            ]
        )
        for verb in ("export", "verify"):
            rows.append(
                [
                    f"audit {verb} (CPU s / peak MB)",
                    *(
                        f"{history[s]['audit'][verb]['cpu_s']:.1f} / "
                        f"{history[s]['audit'][verb]['peak_rss_mb']:.0f}"
                        for s in sizes
                    ),
                ]
            )
        parts.append(_rows("History (requests; 3 audit entries each)", columns, rows))
        opened = next((history[s]["open"] for s in sizes if "open" in history[s]), None)
        if opened:
            counts = list(opened)
            rows = [
                [name, *(_cell(opened[c][name]) for c in counts)]
                for name in ("scheduler_tick", "sweeper_round")
            ]
            columns = ["open and scheduled requests", *(f"{int(c):,} + {int(c):,}" for c in counts)]
            parts.append(_rows("Waiting requests", columns, rows))
    clusters = report["clusters"]
    if clusters:
        counts = sorted(clusters, key=int)
        names = list(clusters[counts[0]])
        columns = ["figure (CPU ms / statements)", *(f"{int(c):,}" for c in counts)]
        rows = [[name, *(_cell(clusters[c][name]) for c in counts)] for name in names]
        parts.append(_rows("Clusters in one project", columns, rows))
    watcher = report.get("watcher")
    if watcher:
        rows = [[k, str(v)] for k, v in watcher.items()]
        parts.append(_rows("Watcher rounds", ["figure", "value"], rows))
    checked = report.get("checks", [])
    if checked:
        rows = [[_verdict(c), c["target"], c["detail"]] for c in checked]
        parts.append(_rows("Targets", ["", "target", "figure"], rows))
    return "\n".join(parts)
