"""The Notifier port: the core tells another reader (not Slack) the same meaningful events —
who moved a request where and why — while Slack keeps showing them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from bot.core.notifier import Notifier, RequestEvent, Tone
from bot.core.store import ChangeRequestRecord, RequestState
from bot.local.demo.stack import LocalStack
from bot.providers.base import ClusterSummary
from tests.support.workflow_kit import (
    BOB,
    DAVE,
    NOTIFY_CHANNEL,
    click,
    deny,
    open_direct,
    wait_root,
    wait_state,
)


@dataclass
class RecordingNotifier:
    """Writes down what the core tells, then passes it on to the Slack notifier."""

    inner: Notifier
    seen: list[tuple[str, ...]] = field(default_factory=list)
    changes: list[tuple[RequestState, RequestEvent]] = field(default_factory=list)

    async def request_opened(self, record: ChangeRequestRecord) -> str:
        self.seen.append(("opened", record.id))
        return await self.inner.request_opened(record)

    async def approval_requested(self, record: ChangeRequestRecord, expire_minutes: int) -> str:
        self.seen.append(("approval_requested", record.id, str(expire_minutes)))
        return await self.inner.approval_requested(record, expire_minutes)

    async def request_changed(self, record: ChangeRequestRecord, event: RequestEvent) -> None:
        self.seen.append(("changed", str(record.state), event.kind))
        self.changes.append((record.state, event))
        await self.inner.request_changed(record, event)

    async def follow_up_note(self, record: ChangeRequestRecord, text: str, tone: Tone) -> None:
        self.seen.append(("follow_up_note", tone))
        await self.inner.follow_up_note(record, text, tone)

    async def result(self, record: ChangeRequestRecord, summary: ClusterSummary) -> str | None:
        self.seen.append(("result", summary.cluster_id))
        return await self.inner.result(record, summary)

    async def status(
        self, record: ChangeRequestRecord, summary: ClusterSummary, as_of: datetime
    ) -> None:
        self.seen.append(("status", summary.status))
        await self.inner.status(record, summary, as_of)

    async def mirror(self, record: ChangeRequestRecord, headline: str, channel: str) -> str | None:
        self.seen.append(("mirror", headline, channel))
        return await self.inner.mirror(record, headline, channel)

    async def mirror_edit(self, record: ChangeRequestRecord, channel: str, ts: str) -> None:
        self.seen.append(("mirror_edit", str(record.state), channel))
        await self.inner.mirror_edit(record, channel, ts)

    async def policy_kept(self, channel: str, text: str) -> None:
        self.seen.append(("policy_kept", channel))
        await self.inner.policy_kept(channel, text)


def recording(stack: LocalStack) -> RecordingNotifier:
    deps = stack.runtime.workflow.deps
    recorder = RecordingNotifier(deps.notifier)
    deps.notifier = recorder
    return recorder


async def test_an_approved_change_is_told_as_events_with_who_and_why(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    recorder = recording(stack)
    opened = await open_direct(
        stack, DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    await click(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, RequestState.SUCCEEDED)
    await stack.runtime.workflow.drain()
    await wait_root(stack, opened, "done")  # Slack still shows it all

    assert recorder.seen[:3] == [
        ("opened", opened.id),
        ("approval_requested", opened.id, "30"),
        ("mirror", "Change requested", NOTIFY_CHANNEL),
    ]
    kinds = [(state, event.kind, event.actor) for state, event in recorder.changes]
    assert kinds == [
        (RequestState.APPROVED, "approved", BOB),
        (RequestState.EXECUTING, "executing", BOB),
        (RequestState.SUCCEEDED, "finished", DAVE),
    ]
    approved, executing, finished = (event for _, event in recorder.changes)
    assert approved.left_pending and not executing.left_pending
    assert finished.text  # what the provider said
    # the result follows the final event, and the notify channel hears of it last
    told = recorder.seen.index(("changed", "succeeded", "finished"))
    shown = recorder.seen.index(("result", "101"))
    mirrored = recorder.seen.index(("mirror", "Change done", NOTIFY_CHANNEL))
    assert told < shown < mirrored


async def test_a_denial_is_one_event_that_leaves_pending(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    recorder = recording(stack)
    opened = await open_direct(
        stack, DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    await deny(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, RequestState.DENIED)
    await wait_root(stack, opened, "denied")

    # The mirror to the notify channel comes after the root is edited: wait for it.
    mirrored = ("mirror", "Change denied", NOTIFY_CHANNEL)
    await stack.slack.wait_for(lambda: mirrored in recorder.seen)
    [(state, event)] = recorder.changes
    assert state is RequestState.DENIED
    assert (event.kind, event.actor, event.left_pending) == ("denied", BOB, True)
    assert stack.e2e.calls("action", "PUT") == []
