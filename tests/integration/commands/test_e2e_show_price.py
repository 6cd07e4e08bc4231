"""`/gpu show` of an E2E cluster over real HTTP: E2E prices a node, so the billing line
says "per node" and what the whole cluster costs."""

from __future__ import annotations

from tests.conftest import StackFactory

DAVE, CHANNEL = "U04DAVE", "C0INCIDENT"


async def test_show_of_a_two_node_e2e_cluster_prices_per_node_and_in_total(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    await stack.sender.command(DAVE, CHANNEL, "show e2e-delhi 101")

    def shown() -> str | None:
        texts = [str(e.blocks) + e.text for e in stack.slack.ephemerals_for(DAVE)]
        texts += [str(m.blocks) + m.text for m in stack.slack.messages.get(CHANNEL, [])]
        return next((text for text in texts if "train-h100-a" in text), None)

    text = await stack.slack.wait_for(shown, within=10)
    assert "hourly · ₹1,995.20/h per node · ₹3,990.40/h for 2 nodes" in text
