"""HomeRefresher coalesces publishes per person and survives failures; FanOutNotifier tells
readers what the primary was told and keeps a reader's failure from the change."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.core.home_refresh import FanOutNotifier, HomeRefresher
from bot.core.notifier import NotDelivered, RequestEvent
from bot.core.store import ChangeRequestRecord, RequestState
from bot.metrics import HOME_PUBLISHES


class Recorder:
    def __init__(self, fail_for: set[str] | None = None) -> None:
        self.published: list[tuple[str, float]] = []
        self.fail_for = fail_for or set()

    async def publish(self, user: str) -> None:
        self.published.append((user, asyncio.get_running_loop().time()))
        if user in self.fail_for:
            raise RuntimeError("views.publish failed: internal_error")


async def never(_user: str, _record: ChangeRequestRecord) -> bool:
    return False


def record(requester: str = "U04DAVE") -> ChangeRequestRecord:
    now = datetime.now(UTC)
    return ChangeRequestRecord(
        id="CR-ABC123",
        provider="e2e",
        project="e2e-delhi",
        cluster_id="101",
        cluster_name="train-a",
        action="scale_cluster",
        plan={},
        kinds=["scale_cluster"],
        needs_approval=True,
        requester=requester,
        channel="C0INCIDENT",
        state=RequestState.PENDING,
        created_at=now,
        updated_at=now,
        reason=None,
        root_ts=None,
        summary_ts=None,
        decided_by=None,
        decision_note=None,
        break_glass=False,
        result_message=None,
        expires_at=None,
        version=1,
    )


async def test_a_burst_for_one_person_is_one_publish_on_the_trailing_edge() -> None:
    recorder = Recorder()
    refresher = HomeRefresher(recorder.publish, never, interval=0.3, delay=0.1)
    for _ in range(20):
        refresher.schedule("U1")
    refresher.schedule("U2")
    await refresher.drain()
    assert sorted(u for u, _ in recorder.published) == ["U1", "U2"]


async def test_publishes_for_a_person_are_at_least_the_interval_apart() -> None:
    recorder = Recorder()
    refresher = HomeRefresher(recorder.publish, never, interval=0.4, delay=0.0)
    refresher.opened("U1")
    await refresher.drain()
    refresher.schedule("U1")
    refresher.schedule("U1")
    await refresher.drain()
    times = [t for _, t in recorder.published]
    assert len(times) == 2
    assert times[1] - times[0] >= 0.39  # the interval is the contract here


async def test_a_failed_publish_is_counted_and_the_next_one_still_happens() -> None:
    recorder = Recorder(fail_for={"U1"})
    refresher = HomeRefresher(recorder.publish, never, interval=0.0, delay=0.0)
    failed = HOME_PUBLISHES.labels("failed")._value.get()
    refresher.schedule("U1")
    await refresher.drain()
    refresher.schedule("U1")
    await refresher.drain()
    assert [u for u, _ in recorder.published] == ["U1", "U1"]
    assert HOME_PUBLISHES.labels("failed")._value.get() == failed + 2


async def test_a_decision_refreshes_requester_actor_and_approvers_who_opened_home() -> None:
    recorder = Recorder()

    async def may_approve(user: str, _record: ChangeRequestRecord) -> bool:
        return user == "U02BOB"

    refresher = HomeRefresher(recorder.publish, may_approve, interval=0.0, delay=0.0)
    for viewer in ("U02BOB", "U05ERIN", "U03CAROL", "U04DAVE"):
        refresher.opened(viewer)
    await refresher.drain()
    recorder.published.clear()
    event = RequestEvent("denied", "U03CAROL", left_pending=True)
    await refresher.request_changed(record(), event)
    await refresher.drain()
    assert sorted(u for u, _ in recorder.published) == ["U02BOB", "U03CAROL", "U04DAVE"]
    recorder.published.clear()
    await refresher.request_changed(record(), RequestEvent("finished", "gpuops"))
    await refresher.drain()
    assert [u for u, _ in recorder.published] == ["U04DAVE"]


async def test_a_tab_nobody_opened_is_not_published_on_a_change() -> None:
    recorder = Recorder()

    async def may_approve(user: str, _record: ChangeRequestRecord) -> bool:
        return True

    refresher = HomeRefresher(recorder.publish, may_approve, interval=0.0, delay=0.0)
    await refresher.request_opened(record())
    await refresher.request_changed(record(), RequestEvent("denied", "U03CAROL", left_pending=True))
    await refresher.drain()
    assert recorder.published == []  # building a tab lists every project: only for readers
    refresher.opened("U04DAVE")
    await refresher.drain()
    assert [u for u, _ in recorder.published] == ["U04DAVE"]


class Primary:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[str] = []

    async def request_opened(self, _record: ChangeRequestRecord) -> str:
        self.calls.append("request_opened")
        if self.fail:
            raise NotDelivered("not_in_channel", "invite me")
        return "1700000000.000100"

    def __getattr__(self, name: str) -> Any:
        async def call(*_args: Any) -> None:
            self.calls.append(name)

        return call


class BrokenReader(Primary):
    async def request_opened(self, _record: ChangeRequestRecord) -> str:
        raise RuntimeError("reader down")


async def test_fan_out_returns_the_primary_handle_and_ignores_a_failing_reader() -> None:
    primary, reader, broken = Primary(), Primary(), BrokenReader()
    fan_out = FanOutNotifier(primary, [broken, reader])
    assert await fan_out.request_opened(record()) == "1700000000.000100"
    assert reader.calls == ["request_opened"]
    await fan_out.follow_up_note(record(), "steady", "good")
    assert reader.calls[-1] == "follow_up_note" and primary.calls[-1] == "follow_up_note"


async def test_fan_out_lets_the_primary_refusal_through_and_tells_no_reader() -> None:
    primary, reader = Primary(fail=True), Primary()
    fan_out = FanOutNotifier(primary, [reader])
    with pytest.raises(NotDelivered):
        await fan_out.request_opened(record())
    assert reader.calls == []
