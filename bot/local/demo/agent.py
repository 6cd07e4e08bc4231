"""The demo's ``agent`` mode (SPEC §15): a scripted MCP client that launches ``gpuops mcp``
over stdio, on the demo's database, simulators and Slack stand-in, as the current user
with a token made for them, and proposes a change. The proposal then waits in the chat
for its requester's Confirm, as an agent's always does."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult, Implementation, TextContent

from bot.core.answers import Notice
from bot.local.demo.stack import LocalStack

CLIENT_NAME = "gpuops-demo-agent"
_TOKEN = re.compile(r"gpo_[A-Za-z0-9_\-]{20,}")


def _env(stack: LocalStack, token: str) -> dict[str, str]:
    settings, options = stack.runtime.settings, stack.options
    return {
        "PATH": "",
        "SLACK_BOT_TOKEN": options.bot_token,
        "SLACK_API_URL": stack.slack.api_url,
        "GPUOPS_POLICY": str(settings.gpuops_policy),
        "GPUOPS_DATABASE_URL": settings.gpuops_database_url,
        "TOGETHER_BASE_URL": stack.together.base_url,
        "E2E_BASE_URL": stack.e2e.base_url,
        "TOGETHER_API_KEY": options.together_key,
        "E2E_API_KEY": options.e2e_key,
        "E2E_AUTH_TOKEN": options.e2e_token,
        "GPUOPS_POLL_SECONDS": "0",
        "GPUOPS_INSTANCE_ID": "demo-agent",
        "GPUOPS_MCP_TOKEN": token,
    }


async def _token_for(stack: LocalStack, user: str) -> str:
    """A token for the demo's current user, as ``/gpu token new`` makes one."""
    tokens = stack.runtime.ops.tokens
    for old in await tokens.listing(user):
        if old.name == "demo-agent" and old.revoked_at is None:
            await tokens.revoke(user, "demo-agent")
    reply = await tokens.issue(user, "1h", "demo-agent")
    text = reply.content.text if isinstance(reply.content, Notice) else ""
    found = _TOKEN.search(text)
    if found is None:
        raise RuntimeError(text or "no token was made")
    return found.group(0)


def _shown(result: CallToolResult) -> str:
    if result.is_error:
        words = " ".join(c.text for c in result.content if isinstance(c, TextContent))
        return f"refused: {words}"
    answer = result.structured_content or {}
    return json.dumps(answer, ensure_ascii=False)[:600]


def parse_proposal(rest: str, channel: str) -> dict[str, Any]:
    """``<project> <cluster_id> [<action>] [field=value …] [reason="…"]``, as /gpu takes it."""
    import shlex

    words = shlex.split(rest)
    if len(words) < 2:
        raise ValueError("usage: agent <project> <cluster_id> [<action>] [field=value …]")
    project, cluster_id, *more = words
    action = more.pop(0) if more and "=" not in more[0] else None
    fields: dict[str, str] = {}
    reason = "proposed by the demo agent"
    for word in more:
        key, _, value = word.partition("=")
        if key == "reason":
            reason = value
        else:
            fields[key] = value
    proposal: dict[str, Any] = {
        "project": project,
        "cluster_id": cluster_id,
        "fields": fields,
        "reason": reason,
        "channel": channel,
    }
    if action:
        proposal["action"] = action
    return proposal


async def run_agent(
    stack: LocalStack,
    user: str,
    proposal: Mapping[str, Any],
    emit: Callable[[str], None],
) -> str | None:
    """Launch ``gpuops mcp`` over stdio as ``user``, read the cluster and the policy, and
    propose the change; the request id (None when refused)."""
    token = await _token_for(stack, user)
    gpuops = Path(sys.executable).with_name("gpuops")
    params = StdioServerParameters(
        command=str(gpuops) if gpuops.exists() else sys.executable,
        args=(["--log-level", "ERROR", "mcp"] if gpuops.exists() else ["-m", "bot.cli", "mcp"]),
        env=_env(stack, token),
        cwd=str(stack.workdir),
    )
    emit(f"(agent) {CLIENT_NAME} starts `gpuops mcp` over stdio with a token made for you")
    info = Implementation(name=CLIENT_NAME, version="1")
    async with Client(params, client_info=info) as client:
        project, cluster_id = str(proposal["project"]), str(proposal["cluster_id"])
        shown = await client.call_tool(
            "show_cluster", {"project": project, "cluster_id": cluster_id}
        )
        emit(f"(agent) show_cluster → {_shown(shown)}")
        policy = await client.call_tool("explain_policy", {"project": project})
        emit(f"(agent) explain_policy → {_shown(policy)}")
        proposed = await client.call_tool("propose_change", dict(proposal))
        emit(f"(agent) propose_change → {_shown(proposed)}")
        if proposed.is_error or not proposed.structured_content:
            return None
        request_id = str(proposed.structured_content.get("request_id"))
        emit(
            f"(agent) {request_id} waits for you: press its Confirm in the channel "
            "(nothing runs before that)"
        )
        return request_id
