"""The root's "running" edit is made only when a change is still being sent after a moment,
and never lands after the edit that follows it (SPEC §4.3: the root shows the current state)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from slack_sdk.web.async_client import AsyncWebClient

from bot.core.notifier import RequestEvent
from bot.core.store import ChangeRequestRecord, RequestState
from bot.providers.base import ChangePlan
from bot.slack.messenger import Messenger
from bot.slack.notifier import SlackNotifier
from bot.slack.render.primitives import SlackMessage

ROOT_TS = "1700000000.000100"


class HeldMessenger(Messenger):
    """Records edits of messages; an edit waits while ``held`` is clear."""

    def __init__(self) -> None:
        super().__init__(AsyncWebClient(token="xoxb-test", base_url="http://127.0.0.1:9/api/"))
        self.started = 0  # edits begun
        self.edits: list[str] = []  # edits made
        self.editing = asyncio.Event()  # an edit has begun
        self.held = asyncio.Event()
        self.held.set()

    async def post(
        self, channel: str, message: SlackMessage, *, thread_ts: str | None = None
    ) -> str:
        return "1700000000.000200"

    async def update(self, channel: str, ts: str, message: SlackMessage) -> None:
        self.started += 1
        self.editing.set()
        await self.held.wait()
        self.edits.append(message.text.split("]", 1)[0].lstrip("["))


PLAN = ChangePlan(
    provider="together",
    project="together-prod",
    cluster_id="tc-1",
    cluster_name="infer",
    action="update",
    body={"num_gpus": 16},
    kinds=["scale_up"],
    lines=[],
    fingerprint={},
)


def record(state: RequestState) -> ChangeRequestRecord:
    now = datetime.now(UTC)
    return ChangeRequestRecord(
        id="CR-ABC123",
        provider="together",
        project="together-prod",
        cluster_id="tc-1",
        cluster_name="infer",
        action="update",
        plan={"plan": PLAN.model_dump(mode="json")},
        kinds=["scale_up"],
        needs_approval=False,
        requester="U04DAVE",
        channel="C0INCIDENT",
        state=state,
        created_at=now,
        updated_at=now,
        reason=None,
        root_ts=ROOT_TS,
        summary_ts=None,
        decided_by=None,
        decision_note=None,
        break_glass=False,
        result_message="accepted" if state is RequestState.SUCCEEDED else None,
        expires_at=None,
        version=1,
    )


EXECUTING = RequestEvent("executing", "U04DAVE")
FINISHED = RequestEvent("finished", "U04DAVE", "accepted", summary_follows=True)


async def test_a_change_that_ends_within_the_moment_is_edited_once() -> None:
    messenger = HeldMessenger()
    notifier = SlackNotifier(messenger, running_after=3600)
    await notifier.request_changed(record(RequestState.EXECUTING), EXECUTING)
    await notifier.request_changed(record(RequestState.SUCCEEDED), FINISHED)
    assert messenger.edits == ["done"]


async def test_an_edit_to_running_under_way_lands_before_the_result() -> None:
    messenger = HeldMessenger()
    messenger.held.clear()
    notifier = SlackNotifier(messenger, running_after=0)
    await notifier.request_changed(record(RequestState.EXECUTING), EXECUTING)
    await messenger.editing.wait()  # the moment has passed: "running" is being sent
    finished = asyncio.ensure_future(
        notifier.request_changed(record(RequestState.SUCCEEDED), FINISHED)
    )
    for _ in range(5):  # every step the result's edit could take without waiting
        await asyncio.sleep(0)
    assert messenger.started == 1 and not finished.done()
    messenger.held.set()
    await finished
    assert messenger.edits == ["running", "done"]
