"""Reservation reminders (SPEC §7.2) over real HTTP: one per horizon of the policy,
never repeated by later polls or a restart; a tighter horizon reached with a wider one
skips the wider; extend_reservation opens gpu_update with reservation_end_time focused."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from bot.core.store import ChangeRequestRecord, RequestState
from bot.local.demo.stack import LocalStack
from bot.local.slack.models import Message
from tests.conftest import StackFactory
from tests.support.watch_kit import CLUSTER, NOTIFY, WATCH_EVERY, WATCH_POLICY, press, watched_stack
from tests.support.workflow_kit import BOB, buttons, readable_text

REMINDER_POLICY = WATCH_POLICY.replace(
    "      reservation_reminders: []\n", "      reservation_reminders: [24h, 1h]\n"
)


def ends_in(stack: LocalStack, left: timedelta) -> None:
    end = (datetime.now(UTC) + left).replace(microsecond=0)
    stack.together.clusters[CLUSTER]["reservation_end_time"] = end.isoformat().replace(
        "+00:00", "Z"
    )


def reminders(stack: LocalStack) -> list[Message]:
    return [
        m
        for m in stack.slack.messages.get(NOTIFY, [])
        if "extend_reservation" in buttons(m) and f"`{CLUSTER}`" in readable_text(m)
    ]


async def test_one_reminder_per_horizon_never_repeated(
    database_url: str, make_stack: StackFactory
) -> None:
    stack = await watched_stack(make_stack, database_url=database_url, policy_yaml=REMINDER_POLICY)
    ends_in(stack, timedelta(hours=23, minutes=30))
    first = await stack.slack.wait_for(lambda: next(iter(reminders(stack)), None), within=10)
    assert "train-h100-reserved's reservation ends" in first.text and "in 23 h" in first.text
    assert "24h reminder" in readable_text(first)
    await asyncio.sleep(WATCH_EVERY * 4)
    assert len(reminders(stack)) == 1

    ends_in(stack, timedelta(minutes=50))  # moved closer: the 1h horizon, the 24h skipped
    await stack.slack.wait_for(lambda: len(reminders(stack)) == 2, within=10)
    assert "1h reminder" in readable_text(reminders(stack)[1])
    await stack.restart_bot()
    await asyncio.sleep(WATCH_EVERY * 4)
    assert len(reminders(stack)) == 2


async def test_extend_opens_the_update_form_on_the_end_time(make_stack: StackFactory) -> None:
    stack = await watched_stack(make_stack, policy_yaml=REMINDER_POLICY)
    ends_in(stack, timedelta(hours=20))
    reminder = await stack.slack.wait_for(lambda: next(iter(reminders(stack)), None), within=10)
    await press(stack, reminder, BOB, "extend_reservation")
    view = await stack.slack.wait_for(
        lambda: (
            (v := stack.slack.last_view_for(BOB, open_only=True))
            and any(b.get("block_id") == "reservation_end_time" for b in v.view.get("blocks", []))
            and v
        )
    )
    assert view.view["callback_id"] == "gpu_update"
    focused = [
        b["block_id"]
        for b in view.view["blocks"]
        if b.get("type") == "input" and b["element"].get("focus_on_load")
    ]
    assert focused == ["reservation_end_time"]


async def test_extending_from_the_reminder_runs_at_once_as_an_extension(
    make_stack: StackFactory,
) -> None:
    """The reminder's Extend reservation… moves the end later: an extension, which needs no
    approval by default (it used to be classified as a two-approver decommission)."""
    stack = await watched_stack(make_stack, policy_yaml=REMINDER_POLICY)
    ends_in(stack, timedelta(hours=20))
    reminder = await stack.slack.wait_for(lambda: next(iter(reminders(stack)), None), within=10)
    await press(stack, reminder, BOB, "extend_reservation")
    view = await stack.slack.wait_for(
        lambda: (
            (v := stack.slack.last_view_for(BOB, open_only=True))
            and any(b.get("block_id") == "reservation_end_time" for b in v.view.get("blocks", []))
            and v
        )
    )
    later = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)
    submitted = await stack.sender.view_submission(
        BOB, view.id, {"reservation_end_time": str(int(later.timestamp()))}
    )
    assert submitted.status == 200 and submitted.json is None, submitted
    store = stack.runtime.store

    async def ran() -> ChangeRequestRecord | None:
        done = await store.list_requests(cluster_id=CLUSTER, states=[RequestState.SUCCEEDED])
        return done[0] if done else None

    record = None
    async with asyncio.timeout(20):
        while (record := await ran()) is None:
            await asyncio.sleep(0.05)
    assert record.kinds == ["extend_reservation"] and not record.needs_approval
    assert record.root_ts is not None
    thread = stack.slack.replies(record.channel, record.root_ts)
    assert not any("approve_request" in buttons(m) for m in thread)
    assert "decommission" not in " ".join(readable_text(m) for m in thread)
    end = stack.together.clusters[CLUSTER]["reservation_end_time"]
    assert datetime.fromisoformat(end) == later
