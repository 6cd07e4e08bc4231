"""The local stack comes up and a signed /gpu show round-trips on both state stores."""

from __future__ import annotations

from bot.local.demo.stack import LocalStack


async def test_show_posts_the_cluster_summary_in_the_channel(stack: LocalStack) -> None:
    result = await stack.sender.command(
        "U04DAVE", "C0INCIDENT", "show together-prod tc-h100-reserved"
    )
    assert result.status == 200 and result.acked_in_time
    posted = await stack.slack.wait_for(
        lambda: next(
            (m for m in stack.slack.messages.get("C0INCIDENT", []) if "tc-h100-reserved" in m.text),
            None,
        )
    )
    assert "Ready" in posted.text and "16 GPUs" in posted.text
