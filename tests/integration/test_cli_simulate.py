"""``gpuops simulate`` as a real subprocess: the base URLs it prints are the ones the
clients take as they are (gpuops and the official Together SDK append ``compute/…`` to a
URL that ends in ``/v1``; E2E paths follow the documented ``…/api/v1/gpu`` prefix)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import httpx

GPUOPS = str(Path(sys.executable).with_name("gpuops"))
URL = re.compile(r"(TOGETHER|E2E)_BASE_URL=(\S+)")


async def _printed_urls(process: asyncio.subprocess.Process) -> dict[str, str]:
    assert process.stdout is not None
    urls: dict[str, str] = {}
    while len(urls) < 2:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
        assert line, "gpuops simulate exited before printing its URLs"
        if match := URL.search(line.decode()):
            urls[match.group(1)] = match.group(2)
    return urls


async def test_simulate_prints_the_urls_clients_use_as_they_are(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        GPUOPS,
        "simulate",
        "--port",
        "0",
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        urls = await _printed_urls(process)
        assert urls["TOGETHER"].endswith("/v1")
        async with httpx.AsyncClient(timeout=10) as http:
            together = await http.get(
                urls["TOGETHER"] + "/compute/clusters",
                headers={"Authorization": "Bearer sim-together-key"},
            )
            assert together.status_code == 200 and together.json()["clusters"]
            e2e = await http.get(
                urls["E2E"] + "/distributed_jobs_v2/cluster/",
                params={"apikey": "sim-e2e-apikey", "project_id": "12345", "location": "Delhi"},
                headers={"Authorization": "Bearer sim-e2e-token"},
            )
            assert e2e.status_code == 200 and e2e.json()["data"]
    finally:
        process.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(process.wait(), timeout=20)
        except TimeoutError:
            process.kill()
            await process.wait()
