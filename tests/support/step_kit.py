"""Helpers for the Workflow Builder step tests (``request_gpu_change``, SPEC §11): a step's
inputs, running it through the Slack stand-in, waiting for its end, the completions Slack
took, and every stored row as the database holds it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import inspect, text

from bot.local.demo.stack import LocalStack
from bot.local.slack.functions import FunctionRun
from bot.local.slack.models import Message
from tests.support.slack_support import roots
from tests.support.workflow_kit import CHANNEL, DAVE, REQUEST_ID, Opened, find_prompt

STEP = "request_gpu_change"
SCALE_101 = ("e2e-delhi", "101", "scale_cluster additional_nodes=2")  # needs approval
GROW_H200 = ("together-prod", "tc-h200-ondemand", "num_gpus=16")  # runs at once


def inputs(
    project: str,
    cluster_id: str,
    change: str,
    *,
    requester: str = DAVE,
    reason: str | None = None,
    channel: str = CHANNEL,
) -> dict[str, Any]:
    given: dict[str, Any] = {
        "project": project,
        "cluster_id": cluster_id,
        "change": change,
        "requester": requester,
        "channel": channel,
    }
    if reason is not None:
        given["reason"] = reason
    return given


async def run_step(stack: LocalStack, given: dict[str, Any]) -> FunctionRun:
    """A workflow reaches the step with ``given``: its run, once the bot acked the event."""
    run, result = await stack.sender.function_executed(STEP, given)
    assert result.status == 200 and result.acked_in_time, result
    return run


async def ended(stack: LocalStack, run: FunctionRun, *, within: float = 10.0) -> FunctionRun:
    """The run once the bot has completed it (either way)."""
    return await stack.slack.wait_for(
        lambda: run if run.state != "running" else None, within=within
    )


async def opened_by_step(stack: LocalStack) -> Opened:
    """The request a step made: its root message and approval prompt in the channel."""
    root: Message = await stack.slack.wait_for(
        lambda: next((m for m in roots(stack, CHANNEL) if REQUEST_ID.search(m.text)), None)
    )
    match = REQUEST_ID.search(root.text)
    assert match is not None
    prompt = await stack.slack.wait_for(lambda: find_prompt(stack, CHANNEL, root.ts))
    return Opened(match.group(0), CHANNEL, root.ts, prompt.ts)


def completions(stack: LocalStack) -> list[str]:
    """The completions Slack took, in order."""
    return [
        c.method for c in stack.slack.calls if c.method.startswith("functions.complete") and c.ok
    ]


def completion_calls(stack: LocalStack) -> list[tuple[str, str | None]]:
    """Every completion the bot sent (taken or not): method and Slack's error."""
    return [
        (c.method, c.error) for c in stack.slack.calls if c.method.startswith("functions.complete")
    ]


async def stored_steps(stack: LocalStack) -> list[dict[str, Any]]:
    """Every column of every stored step, as the database holds it."""
    async with stack.runtime.store.engine.connect() as conn:
        every_column = text("SELECT * FROM gpuops_workflow_steps")
        return [dict(row) for row in (await conn.execute(every_column)).mappings().all()]


async def every_stored_row(stack: LocalStack) -> str:
    """Every row of every table in the database (whatever made it), as text: to look for
    what must not be stored."""
    found: list[str] = []
    async with stack.runtime.store.engine.connect() as conn:
        names = await conn.run_sync(lambda sync: inspect(sync).get_table_names())
        assert "gpuops_workflow_steps" in names, names
        for name in names:
            rows = await conn.execute(text(f'SELECT * FROM "{name}"'))  # noqa: S608
            found += [f"{name}: {tuple(row)}" for row in rows.all()]
    return "\n".join(found)
