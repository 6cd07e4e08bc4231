"""The MCP server over streamable HTTP (``/mcp`` on the bot), driven by the ``mcp`` SDK's
own client: each tool's schema and answers, with the token's person's grants."""

from __future__ import annotations

from tests.conftest import StackFactory
from tests.support.mcp_kit import agent, answer_of, error_of, make_token, mcp_url
from tests.support.workflow_kit import CHANNEL, DAVE, ERIN

REQUIRED = {
    "list_clusters": set(),
    "show_cluster": {"project", "cluster_id"},
    "explain_policy": {"project"},
    "propose_change": {"project", "cluster_id", "channel", "reason"},
    "request_status": {"request_id"},
    "cancel_request": {"request_id"},
}


async def test_the_tools_have_schemas_and_answer_with_the_persons_grants(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    token = await make_token(stack, DAVE)
    async with agent(mcp_url(stack), token) as client:
        listed = await client.list_tools()
        tools = {t.name: t for t in listed.tools}
        assert set(tools) == set(REQUIRED)
        for name, tool in tools.items():
            schema = tool.input_schema
            assert tool.description and len(tool.description) < 200
            assert schema["type"] == "object"
            assert set(schema.get("required", [])) == REQUIRED[name], name
            assert tool.output_schema is not None, name
        assert "channel" in tools["list_clusters"].input_schema["properties"]

        clusters = answer_of(await client.call_tool("list_clusters", {}))
        assert {p["project"] for p in clusters["projects"]} == {"together-prod", "e2e-delhi"}
        assert clusters["page"] == 1 and clusters["pages"] >= 1
        one = answer_of(
            await client.call_tool("show_cluster", {"project": "e2e-delhi", "cluster_id": "101"})
        )
        assert one["status"] == {"quoted": True, "text": "Running"} and one["facts"]
        policy = answer_of(await client.call_tool("explain_policy", {"project": "together-prod"}))
        assert policy["role"] == "operator"
        assert any("scale_down" in line for line in policy["lines"])
        unknown = await client.call_tool("show_cluster", {"project": "nope", "cluster_id": "1"})
        assert "no such project or no access: nope" in error_of(unknown)
        missing = await client.call_tool(
            "propose_change",
            {"project": "e2e-delhi", "cluster_id": "101", "channel": CHANNEL, "reason": "x"},
        )
        assert "incomplete" in error_of(missing)

    # Erin's grant holds only in #incident: her token lists nothing without that channel.
    erin = await make_token(stack, ERIN, name="erin")
    async with agent(mcp_url(stack), erin) as client:
        nothing = await client.call_tool("list_clusters", {})
        assert "grants hold in <#C0INCIDENT>" in error_of(nothing)
        there = answer_of(await client.call_tool("list_clusters", {"channel": CHANNEL}))
        assert {p["project"] for p in there["projects"]} == {"together-prod", "e2e-delhi"}
