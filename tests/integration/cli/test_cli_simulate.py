"""``gpuops simulate`` as a real subprocess: the base URLs it prints are the ones the
clients take as they are (gpuops appends ``compute/…`` to a URL that ends in ``/v1``; the
official Together SDK appends ``/v1/compute/…`` to the host alone; E2E paths follow the
documented ``…/api/v1/gpu`` prefix), and it names the fault kinds it can inject."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import httpx

from bot.local.simulators.base import FaultKind

GPUOPS = str(Path(sys.executable).with_name("gpuops"))
URL = re.compile(r"(TOGETHER|E2E)_BASE_URL=(\S+)")
SDK_URL = re.compile(r'Together\(base_url="([^"]+)"\)')


async def _banner(process: asyncio.subprocess.Process) -> str:
    """What it prints up to its fault-injection line."""
    assert process.stdout is not None
    lines: list[str] = []
    while not lines or not lines[-1].startswith("Fault injection"):
        line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
        assert line, "gpuops simulate exited before printing its URLs"
        lines.append(line.decode())
    return "".join(lines)


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
        banner = await _banner(process)
        urls = dict(URL.findall(banner))
        sdk_match = SDK_URL.search(banner)
        assert sdk_match is not None, banner
        assert urls["TOGETHER"].endswith("/v1") and not sdk_match.group(1).endswith("/v1")
        assert all(kind.value in banner for kind in FaultKind)
        auth = {"Authorization": "Bearer sim-together-key"}
        async with httpx.AsyncClient(timeout=10) as http:
            together = await http.get(urls["TOGETHER"] + "/compute/clusters", headers=auth)
            assert together.status_code == 200 and together.json()["clusters"]
            # the path together 3.x builds: "/v1/compute/clusters" on its base_url
            sdk = await http.get(sdk_match.group(1) + "/v1/compute/clusters", headers=auth)
            assert sdk.status_code == 200 and sdk.json()["clusters"]
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
