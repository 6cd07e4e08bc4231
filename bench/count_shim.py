"""``gpuops`` with the cost counters of ``/metrics`` that older builds lack, for
``python -m bench.run --compare-gpuops``: SQL statements and transactions (SQLAlchemy
engine events, SQLite's BEGIN left out) and HTTP calls to Slack (an aiohttp trace on every
client session: in gpuops they all go to Slack). A build that has the counters runs as is.

    <that build's python> bench/count_shim.py --log-level WARNING serve ...

Run as a script by the other build's interpreter: it imports nothing of this checkout.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import aiohttp
from prometheus_client import Counter
from sqlalchemy import event
from sqlalchemy.engine import Engine


def slack_method(path: str) -> str:
    """As bot.slack.calls.slack_method (which an older build does not have)."""
    _, api, method = path.rpartition("/api/")
    if api:
        return method.strip("/")[:64] or "unknown"
    return "file_upload" if "/upload/" in path else "response_url"


def install(registry: Any) -> None:
    statements = Counter("gpuops_store_statements_total", "SQL statements", registry=registry)
    transactions = Counter("gpuops_store_transactions_total", "Transactions", registry=registry)
    calls = Counter("gpuops_slack_calls_total", "Slack calls", ["method"], registry=registry)

    def on_statement(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not statement.startswith("BEGIN"):
            statements.inc()

    def on_begin(_conn: Any) -> None:
        transactions.inc()

    event.listen(Engine, "before_cursor_execute", on_statement)
    event.listen(Engine, "begin", on_begin)

    async def on_request(
        _session: aiohttp.ClientSession,
        _context: SimpleNamespace,
        params: aiohttp.TraceRequestStartParams,
    ) -> None:
        calls.labels(slack_method(params.url.path)).inc()

    original = aiohttp.ClientSession.__init__

    def traced_init(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
        trace = aiohttp.TraceConfig()
        trace.on_request_start.append(on_request)
        kwargs["trace_configs"] = [*(kwargs.get("trace_configs") or []), trace]
        original(self, *args, **kwargs)

    setattr(aiohttp.ClientSession, "__init__", traced_init)  # noqa: B010


def main() -> None:
    import bot.metrics
    from bot.cli import main as gpuops

    if not hasattr(bot.metrics, "SLACK_CALLS"):
        install(bot.metrics.REGISTRY)
    gpuops(sys.argv[1:])


if __name__ == "__main__":
    main()
