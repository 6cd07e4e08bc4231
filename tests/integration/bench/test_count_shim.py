"""bench/count_shim.py gives a build without them the cost counters of /metrics: run in a
subprocess of its own (it patches aiohttp and SQLAlchemy for the whole process), it counts
the statements and transactions of a SQLite engine and each aiohttp request by method."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

SCRIPT = """
import asyncio, sys
from aiohttp import ClientSession, web
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy import create_engine, text
sys.path.insert(0, sys.argv[1])
import count_shim

registry = CollectorRegistry()
count_shim.install(registry)
engine = create_engine("sqlite://")
with engine.begin() as conn:
    conn.execute(text("SELECT 1"))
    conn.execute(text("SELECT 2"))

async def main():
    app = web.Application()
    app.router.add_post("/api/{method}", lambda request: web.json_response({"ok": True}))
    app.router.add_post("/response/{token}", lambda request: web.Response(text="ok"))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    async with ClientSession() as session:
        for path in ("/api/chat.postMessage", "/api/chat.postMessage", "/response/t1"):
            async with session.post(base + path) as response:
                await response.read()
    await runner.cleanup()

asyncio.run(main())
sys.stdout.write(generate_latest(registry).decode())
"""


def test_the_shim_counts_statements_transactions_and_slack_calls() -> None:
    bench = Path(__file__).resolve().parents[3] / "bench"
    done = subprocess.run(  # noqa: S603 - this interpreter and a fixed script
        [sys.executable, "-c", SCRIPT, str(bench)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = {
        (sample.name, sample.labels.get("method", "")): sample.value
        for family in text_string_to_metric_families(done.stdout)
        for sample in family.samples
        if sample.name.endswith("_total")
    }
    assert found[("gpuops_store_statements_total", "")] == 2  # the BEGIN left out
    assert found[("gpuops_store_transactions_total", "")] == 1
    assert found[("gpuops_slack_calls_total", "chat.postMessage")] == 2
    assert found[("gpuops_slack_calls_total", "response_url")] == 1
