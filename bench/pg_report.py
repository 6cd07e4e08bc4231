"""The PostgreSQL levels of the report: figures per level (replicas and server), their
targets, the verdict on replica scaling when the machine's cores are saturated, and the
table.

Scaling (``Targets.pg_scaling_*``), at ``pg_scaling_level`` with 3 replicas against 1:

- *met*: updates/s ≥ 2.5x and CPU per update (replicas + server backends) ≤ 1.2x;
- the throughput part is *not measurable here: cores saturated* when it falls short while
  the bench's own processes (replicas, the server's backends of the bench database, the
  driver) kept ≥ ``saturated_share`` of the machine's cores busy during the 3-replica
  level: there was no core left for a third replica to run on. Other processes' CPU does
  not count towards that share (a busy neighbour is not a reason), and the CPU per update
  part is checked either way, so a regression that costs CPU still misses;
- otherwise *missed*, with the sampled wait events of the server's backends named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.load import LevelOutcome
from bench.report import Targets, app_entry, per_show

STATEMENTS_AT = (
    "the replicas: gpuops_store_statements_total on each replica's /metrics (SQLAlchemy "
    "cursor executes; BEGIN, COMMIT and the pool's pings are not counted there); "
    "pg_stat_statements is {loaded} on this server (shared_preload_libraries = {preload!r})"
)


@dataclass
class PgGroup:
    """One replica count's run: its database, replicas, show calibration and levels."""

    replicas: int
    database: str
    ready_seconds: list[float]
    peak_rss_bytes: list[int]
    shows: LevelOutcome
    levels: list[LevelOutcome]


def _server_costs(outcome: LevelOutcome) -> dict[str, float]:
    server = outcome.server
    return {
        "server_cpu_ms": outcome.cpu_seconds.get("server", 0.0) * 1000,
        "server_transactions": float(server.get("transactions", 0)),
    }


def pg_show_costs(shows: LevelOutcome) -> dict[str, float | None]:
    """One show's costs: the replicas' (as report.per_show) and the server's."""
    costs = per_show(shows)
    n = shows.count("show")
    for key, total in _server_costs(shows).items():
        costs[key] = total / n if n else None
    return costs


def _per_update(outcome: LevelOutcome, show: Mapping[str, float | None]) -> dict[str, float | None]:
    updates, shows = outcome.count("update"), outcome.count("show")
    costs: dict[str, float | None] = {}
    for key, total in _server_costs(outcome).items():
        shown = (show.get(key) or 0.0) * shows
        costs[f"{key}_per_update"] = max(0.0, total - shown) / updates if updates else None
    return costs


def _cores(outcome: LevelOutcome) -> dict[str, float]:
    wall = outcome.wall_seconds or 1.0
    cores = {who: seconds / wall for who, seconds in outcome.cpu_seconds.items()}
    cores["bench"] = sum(cores.get(k, 0.0) for k in ("app", "server", "driver"))
    return cores


def waits(outcome: LevelOutcome) -> dict[str, float]:
    """Share of the sampled non-idle backend states, by wait event (``CPU``: active, no
    wait event), largest first."""
    counted: Mapping[str, int] = outcome.server.get("waits", {})
    total = sum(counted.values())
    return {k: v / total for k, v in counted.items()} if total else {}


def pg_level_entry(outcome: LevelOutcome, show: Mapping[str, float | None]) -> dict[str, Any]:
    entry = app_entry(outcome, dict(show))
    entry.update(_per_update(outcome, show))
    total = [entry["cpu_ms_per_update"], entry["server_cpu_ms_per_update"]]
    entry["total_cpu_ms_per_update"] = None if None in total else sum(v or 0.0 for v in total)
    background = outcome.cpu_seconds.get("server_background", 0.0) * 1000
    updates = outcome.count("update")
    entry["background_cpu_ms_per_update"] = background / updates if updates else None
    entry.update(
        concurrency=outcome.concurrency,
        replicas=outcome.replicas,
        server=outcome.server,
        cores=_cores(outcome),
        waits=waits(outcome),
        chain=outcome.chain,
    )
    return entry


def postgres_report(groups: Sequence[PgGroup], server: Mapping[str, str]) -> dict[str, Any]:
    """The PostgreSQL part of the report; ``server``: its version and preloaded libraries."""
    built = []
    for group in groups:
        show = pg_show_costs(group.shows)
        built.append(
            {
                "replicas": group.replicas,
                "database": group.database,
                "ready_seconds": group.ready_seconds,
                "peak_rss_mb": [b / (1024 * 1024) for b in group.peak_rss_bytes],
                "show_costs": show,
                "levels": [pg_level_entry(o, show) for o in group.levels],
            }
        )
    return {
        "server_version": server["version"],
        "statements_at": STATEMENTS_AT.format(
            preload=server["preload"],
            loaded="loaded but not read"
            if "pg_stat_statements" in server["preload"]
            else "not loaded",
        ),
        "groups": built,
    }


def _level(pg: Mapping[str, Any], replicas: int, concurrency: int) -> dict[str, Any] | None:
    for group in pg["groups"]:
        if group["replicas"] == replicas:
            for lv in group["levels"]:
                if lv["concurrency"] == concurrency:
                    return dict(lv)
    return None


def _f(value: float | None, unit: str = "") -> str:
    return "—" if value is None else f"{value:.1f}{unit}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def saturated(entry: Mapping[str, Any], cpus: int, targets: Targets) -> str | None:
    """ "cores" when the bench's own processes kept ≥ saturated_share of the cores busy in
    this level (see the module's docstring), else None."""
    busy = entry["cores"]["bench"]
    return "cores" if busy >= targets.saturated_share * cpus else None


def busy_detail(entry: Mapping[str, Any], cpus: int) -> str:
    cores = entry["cores"]
    parts = ", ".join(
        f"{name} {cores.get(key, 0.0):.2f}"
        for name, key in (("replicas", "app"), ("server", "server"), ("driver", "driver"))
    )
    top = ", ".join(f"{k} {v:.0%}" for k, v in list(entry["waits"].items())[:4]) or "none"
    return (
        f"{cores['bench']:.2f} of {cpus} cores busy ({parts}; others "
        f"{cores.get('others', 0.0):.2f}); server waits: {top}"
    )


Check = dict[str, Any]


def _check(target: str, ok: bool, detail: str, *, measurable: bool = True) -> Check:
    check: Check = {"target": target, "ok": ok, "detail": detail}
    if not measurable:
        check["not_measurable"] = True
    return check


def scaling_checks(pg: Mapping[str, Any], cpus: int, targets: Targets) -> list[Check]:
    """The 3-against-1-replica targets at ``pg_scaling_level`` (see the module docstring)."""
    low, high = targets.pg_scaling_replicas
    c = targets.pg_scaling_level
    name = f"{high} vs {low} replicas @{c}"
    one, more = _level(pg, low, c), _level(pg, high, c)
    if one is None or more is None:
        detail = f"not run: needs PostgreSQL levels @{c} with {low} and {high} replicas"
        return [_check(f"updates/s {name}", False, detail)]
    speedup = _ratio(more["updates_per_second"], one["updates_per_second"])
    cpu = _ratio(more["total_cpu_ms_per_update"], one["total_cpu_ms_per_update"])
    rates = f"{more['updates_per_second']:.1f} vs {one['updates_per_second']:.1f} updates/s"
    detail = f"{rates} = {_f(speedup, 'x')} (≥ {targets.pg_scaling_throughput:g}x)"
    met = speedup is not None and speedup >= targets.pg_scaling_throughput
    resource = None if met else saturated(more, cpus, targets)
    if resource is not None:
        detail = f"not measurable here: {resource} saturated ({busy_detail(more, cpus)}); {detail}"
    elif not met:
        detail = f"{detail}; with {high}: {busy_detail(more, cpus)}"
    cpu_detail = (
        f"{_f(more['total_cpu_ms_per_update'])} vs {_f(one['total_cpu_ms_per_update'])} ms "
        f"(replicas + server) = {_f(cpu, 'x')} (≤ {targets.pg_scaling_cpu:g}x)"
    )
    return [
        _check(
            f"updates/s {name}",
            met or resource is not None,
            detail,
            measurable=resource is None,
        ),
        _check(
            f"CPU per update {name}",
            cpu is not None and cpu <= targets.pg_scaling_cpu,
            cpu_detail,
        ),
    ]


def postgres_checks(
    pg: Mapping[str, Any],
    sqlite_levels: Sequence[Mapping[str, Any]],
    cpus: int,
    targets: Targets,
) -> list[Check]:
    """Every PostgreSQL target with its measured value."""
    sqlite_cpu = {lv["concurrency"]: lv["gpuops"]["cpu_ms_per_update"] for lv in sqlite_levels}
    checks: list[Check] = []
    for group in pg["groups"]:
        for lv in group["levels"]:
            checks += _level_checks(lv, sqlite_cpu.get(lv["concurrency"]), targets)
    return checks + scaling_checks(pg, cpus, targets)


def _level_checks(lv: Mapping[str, Any], sqlite_cpu: float | None, targets: Targets) -> list[Check]:
    where = f"@{lv['concurrency']} PostgreSQLx{lv['replicas']}"
    statements, xacts = lv["statements_per_update"], lv["server_transactions_per_update"]
    cpu = lv["cpu_ms_per_update"]
    ratio = _ratio(cpu, sqlite_cpu)
    chain = lv["chain"]
    p99 = lv["ack"]["p99"]
    return [
        _check(
            f"0 lost / 0 duplicated {where}",
            lv["lost"] == 0 and lv["duplicated"] == 0 and lv["unmatched_puts"] == 0,
            f"{lv['lost']} lost, {lv['duplicated']} duplicated, {lv['unmatched_puts']} stray "
            f"PUTs, of {lv['updates']} updates + {lv['shows']} shows",
        ),
        _check(
            f"ack p99 < {targets.ack_p99_max:g} s {where}",
            p99 is not None and p99 < targets.ack_p99_max and lv["ack_errors"] == 0,
            f"{_f(None if p99 is None else p99 * 1000, ' ms')}, {lv['ack_errors']} non-200",
        ),
        _check(
            f"statements per update {where}",
            statements is not None and statements <= targets.pg_statements_per_update,
            f"{_f(statements)} at the replicas (≤ {targets.pg_statements_per_update:g}; "
            "shows left out)",
        ),
        _check(
            f"transactions per update {where}",
            xacts is not None and xacts <= targets.pg_transactions_per_update,
            f"{_f(xacts)} at the server, {_f(lv['transactions_per_update'])} opened by the "
            f"replicas (≤ {targets.pg_transactions_per_update:g}; shows left out)",
        ),
        _check(
            f"replica CPU per update vs SQLite {where}",
            ratio is not None and ratio <= targets.pg_cpu_vs_sqlite,
            f"{_f(cpu)} vs {_f(sqlite_cpu)} ms = {_f(ratio, 'x')} "
            f"(≤ {targets.pg_cpu_vs_sqlite:g}x)"
            + ("" if sqlite_cpu is not None else "; no SQLite level at this concurrency"),
        ),
        _check(
            f"audit chain intact {where}",
            bool(chain.get("ok")),
            f"gpuops audit verify: {chain.get('output') or 'not run'}",
        ),
    ]


def markdown(pg: Mapping[str, Any]) -> list[str]:
    """The PostgreSQL table and what its columns are."""
    lines = [
        f"PostgreSQL {pg['server_version']} on 127.0.0.1, a database of the bench's own per"
        " replica count; the load round-robin over the replicas. Per update (shows left out):"
        " *CPU r/s*: CPU ms of the replicas together / of the server's backends of the bench"
        " database; *bg*: the server's background processes' CPU ms over the level's updates"
        " (server-wide, not attributed); *stmts*: at the replicas; *tx s/r*: at the server"
        " (pg_stat_database commits + rollbacks) / opened by the replicas. *cores*: the"
        " bench's own processes (replicas + server backends + driver) / others, in cores."
        " *waits*: the server backends' sampled states.",
        "",
        "| replicas | conc. | cmds | updates/s | ack p50 | ack p99 | summary p50 | summary p99 "
        "| lost | dup | CPU r/s | bg | stmts | tx s/r | Slack | cores | waits | chain |",
        "|---:" * 16 + "|---|---|",
    ]
    for group in pg["groups"]:
        for lv in group["levels"]:
            lines.append(_row(lv))
    return lines


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000:.1f}"


def _row(lv: Mapping[str, Any]) -> str:
    top = ", ".join(f"{k} {v:.0%}" for k, v in list(lv["waits"].items())[:3]) or "—"
    cores = lv["cores"]
    cells = [
        str(lv["replicas"]),
        str(lv["concurrency"]),
        str(lv["commands"]),
        f"{lv['updates_per_second']:.1f}",
        _ms(lv["ack"]["p50"]),
        _ms(lv["ack"]["p99"]),
        _ms(lv["summary"]["p50"]),
        _ms(lv["summary"]["p99"]),
        str(lv["lost"]),
        str(lv["duplicated"]),
        f"{_f(lv['cpu_ms_per_update'])} / {_f(lv['server_cpu_ms_per_update'])}",
        _f(lv["background_cpu_ms_per_update"]),
        _f(lv["statements_per_update"]),
        f"{_f(lv['server_transactions_per_update'])} / {_f(lv['transactions_per_update'])}",
        _f(lv["slack_calls_per_update"]),
        f"{cores['bench']:.2f} / {cores.get('others', 0.0):.2f}",
        top,
        "intact" if lv["chain"].get("ok") else "**BROKEN**",
    ]
    return "| " + " | ".join(cells) + " |"


def add_postgres(
    report: dict[str, Any],
    groups: Sequence[PgGroup],
    server: Mapping[str, str],
    targets: Targets,
) -> None:
    """Add the PostgreSQL levels and their checks to a report of bench.report's."""
    pg = postgres_report(groups, server)
    report["postgres"] = pg
    report["checks"] += postgres_checks(pg, report["levels"], report["machine"]["cpus"], targets)
    report["passed"] = all(c["ok"] for c in report["checks"])
