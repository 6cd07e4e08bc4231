"""The MCP server over streamable HTTP (``/mcp`` on the bot), driven by the ``mcp`` SDK's
own client: each tool's schema and answers, with the token's person's grants."""

from __future__ import annotations

from tests.conftest import StackFactory
from tests.support.mcp_kit import agent, answer_of, make_token, mcp_url
from tests.support.workflow_kit import DAVE

TOOLS = {
    "list_clusters",
    "show_cluster",
    "explain_policy",
    "propose_change",
    "request_status",
    "cancel_request",
}


async def test_the_tools_have_schemas_and_answer_with_the_persons_grants(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    token = await make_token(stack, DAVE)
    async with agent(mcp_url(stack), token) as client:
        listed = await client.list_tools()
        assert {t.name for t in listed.tools} == TOOLS
        for tool in listed.tools:
            assert tool.description and tool.input_schema["type"] == "object"
        clusters = answer_of(await client.call_tool("list_clusters", {}))
        assert {p["project"] for p in clusters["projects"]} == {"together-prod", "e2e-delhi"}
