"""``gpuops mcp`` as a process (SPEC §15), driven by the ``mcp`` SDK's own client: over
stdio with ``GPUOPS_MCP_TOKEN`` (the client launches it), and over streamable HTTP with
``--port``. Both open proposals on the bot's database that the running bot confirms when
their requester clicks Confirm in Slack."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import Implementation

from bot.core.store import RequestState
from tests.conftest import StackFactory
from tests.support.mcp_kit import agent, answer_of, error_of, make_token
from tests.support.slack_support import provider_writes, roots
from tests.support.workflow_kit import CHANNEL, DAVE, process_env, wait_state

GPUOPS = str(Path(sys.executable).with_name("gpuops"))
PROPOSAL = {
    "project": "together-prod",
    "cluster_id": "tc-h200-ondemand",
    "fields": {"num_gpus": 16},
    "reason": "inference backlog",
    "channel": CHANNEL,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_gpuops_mcp_over_stdio_proposes_and_the_bot_runs_it_once_confirmed(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    token = await make_token(stack, DAVE, name="stdio")
    env = {**process_env(stack, "mcp-stdio"), "GPUOPS_MCP_TOKEN": token}
    params = StdioServerParameters(
        command=GPUOPS, args=["--log-level", "WARNING", "mcp"], env=env, cwd=str(stack.workdir)
    )
    info = Implementation(name="scripted-agent", version="1")
    async with Client(params, client_info=info) as client:
        assert "propose_change" in {t.name for t in (await client.list_tools()).tools}
        proposed = answer_of(await client.call_tool("propose_change", PROPOSAL))
        request_id = proposed["request_id"]
        assert proposed["awaiting_confirm"] is True and provider_writes(stack) == []
        root = next(m for m in roots(stack, CHANNEL) if request_id in m.text)
        assert "via agent (scripted-agent)" in str(root.blocks)
        clicked = await stack.sender.block_action(
            DAVE, CHANNEL, action_id="confirm_request", value=request_id, message_ts=root.ts
        )
        assert clicked.status == 200
        await wait_state(stack.runtime.store, request_id, RequestState.SUCCEEDED)
        status = answer_of(await client.call_tool("request_status", {"request_id": request_id}))
        assert status["state"] == "succeeded"


async def test_gpuops_mcp_with_a_port_serves_streamable_http(make_stack: StackFactory) -> None:
    stack = await make_stack()
    token = await make_token(stack, DAVE, name="http")
    port = free_port()
    log_path = stack.workdir / "mcp-http.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            GPUOPS,
            "--log-level",
            "WARNING",
            "mcp",
            "--port",
            str(port),
            env=process_env(stack, "mcp-http"),
            cwd=stack.workdir,
            stdout=log,
            stderr=log,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx2.AsyncClient(timeout=1.0) as http:
            for _ in range(600):
                try:
                    if (await http.get(f"{base}/healthz")).status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                await asyncio.sleep(0.05)
            else:
                raise AssertionError(log_path.read_text()[-2000:])
        async with agent(f"{base}/mcp", token) as client:
            listed = answer_of(await client.call_tool("list_clusters", {"project": "e2e-delhi"}))
            assert [p["project"] for p in listed["projects"]] == ["e2e-delhi"]
        async with agent(f"{base}/mcp", "gpo_unknown-token-value") as client:
            refused = await client.call_tool("list_clusters", {})
            assert "not known to gpuops" in error_of(refused)
    finally:
        process.terminate()
        await process.wait()
