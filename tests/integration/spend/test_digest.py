"""The weekly digest over real HTTP (SPEC §13): due at the policy's weekday and hour, posted
once across two replicas, its figures those of the ledger (month-to-date and GPU-hours per
team and project), and its chart a PNG shared in its thread by the external upload flow."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime
from decimal import Decimal

from bot.core.policy.guardrails import WEEKDAYS
from bot.core.spend.book import project_scope, team_scope
from bot.core.spend.report import dollars, hours
from bot.local.slack.files import UploadedFile
from bot.runtime import Runtime
from tests.conftest import StackFactory
from tests.support.spend_kit import TOGETHER, spend_policy, sums
from tests.support.watch_kit import NOTIFY, until, watched_stack
from tests.support.workflow_kit import readable_text

TEAMS = "  research:\n    projects: [together-prod, e2e-delhi]\n    budget: {monthly_usd: 900000}\n"


def digest_due_now() -> str:
    now = datetime.now(UTC)
    return (
        f"digest: {{channel: {NOTIFY}, weekday: {WEEKDAYS[now.weekday()]}, hour: {now.hour}}}\n"
        "exchange_rates: {INR: 0.012}\n"
    )


async def hold_polls(*runtimes: Runtime) -> None:
    """No replica polls from here on (one in flight finishes first)."""
    projects = [p for r in runtimes for p in r.watcher.projects]
    for project in projects:
        project.due = math.inf
    await until(lambda: all(p.polling is None or p.polling.done() for p in projects))
    for project in projects:
        project.due = math.inf


async def test_the_digest_is_posted_once_with_the_ledgers_figures_and_its_chart(
    pg_database_url: str, make_stack: StackFactory
) -> None:
    policy = spend_policy(teams=TEAMS)
    stack = await watched_stack(
        make_stack,
        database_url=pg_database_url,
        policy_yaml=policy,
        extra_settings={"gpuops_digest_check_seconds": 0.2},
    )
    other = await stack.start_replica("replica-b", start_background=True)
    for _ in range(400):
        found = await sums(stack)
        if found.get("tc-h100-reserved") and found["tc-h100-reserved"].covered_ms > 0:
            break
        await asyncio.sleep(0.05)
    await hold_polls(stack.runtime, other.runtime)
    path = stack.runtime.settings.gpuops_policy
    path.write_text(policy + digest_due_now())
    for runtime in (stack.runtime, other.runtime):
        assert await runtime.reload_policy() in ("reloaded", "unchanged")

    def digests() -> list[str]:
        return [
            readable_text(m)
            for m in stack.slack.messages.get(NOTIFY, [])
            if "Weekly spend digest" in readable_text(m)
        ]

    text = (await stack.slack.wait_for(lambda: digests(), within=20))[0]
    now = datetime.now(UTC)
    spend = stack.runtime.ops.access.spend
    for scope in (
        team_scope(stack.runtime.policy, "research"),
        project_scope(stack.runtime.policy, TOGETHER),
    ):
        standing = await spend.standing(scope, now, live=False)
        assert standing.spent > 0
        said = f"*{scope.title}*: month-to-date {dollars(standing.spent)}"
        assert said in text, (said, text)
        assert f"{hours(standing.gpu_hours)} GPU-hours" in text, text
    ledger = sum((r.cost for r in (await sums(stack)).values()), Decimal(0))
    assert f"*{TOGETHER}*: month-to-date {dollars(ledger)}" in text, text

    def chart() -> UploadedFile | None:
        return next(
            (
                stack.slack.files[f["id"]]
                for m in stack.slack.messages.get(NOTIFY, [])
                if m.source == "files.completeUploadExternal"
                for f in m.files
            ),
            None,
        )

    uploaded = await stack.slack.wait_for(chart, within=20)
    assert uploaded.content is not None and uploaded.content.startswith(b"\x89PNG\r\n\x1a\n")
    root = next(
        m for m in stack.slack.messages[NOTIFY] if "Weekly spend digest" in readable_text(m)
    )
    assert uploaded.thread_ts == root.ts
    # Each replica looks again: the week's digest is out, neither posts it again.
    assert not await stack.runtime.digest.post_if_due()
    assert not await other.runtime.digest.post_if_due()
    assert len(digests()) == 1, digests()
