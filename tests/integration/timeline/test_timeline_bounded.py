"""A timeline file is bounded (issue #34): it lists at most ``MAX_EVENTS`` events of the
window, the first ones, and says how many it left out (counted up to a bound) and how to
get them: ``/gpu timeline <the first left out's time>`` lists the rest, from that event on.
A refused click is no event of the channel's story, neither listed nor counted."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import event

import bot.core.timeline
from bot.core.store import RequestState
from bot.local.demo.stack import LocalStack
from tests.integration.timeline.test_timeline import events, timeline_of
from tests.support.workflow_kit import (
    BOB,
    CHANNEL,
    DAVE,
    MALLORY,
    click,
    poll_until,
    request,
    wait_state,
)

RESUME = re.compile(r"ask `/gpu timeline (\S+)` here")


async def _two_requests_and_a_refused_click(stack: LocalStack) -> None:
    """Two requests run to their end in #incident (4 events each); mallory's click on the
    second is refused (an audit entry the channel's story leaves out)."""
    for cluster, refused_click in (("101", False), ("103", True)):
        opened = await request(stack, DAVE, f"action e2e-delhi {cluster} restart_workers")
        if refused_click:
            await click(stack, opened, MALLORY)

            async def refused(request_id: str = opened.id) -> bool:
                trail = await stack.runtime.store.list_audit(project="e2e-delhi", limit=50)
                return any(e.event == "refused" and e.request_id == request_id for e in trail)

            await poll_until(refused)
        await click(stack, opened, BOB)
        await wait_state(stack.runtime.store, opened.id, RequestState.SUCCEEDED)


async def test_a_full_file_says_what_it_left_out_and_how_to_get_it(
    sqlite_stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = sqlite_stack
    await _two_requests_and_a_refused_click(stack)
    _, whole, _ = await timeline_of(stack, BOB, CHANNEL, "timeline 1h")
    everything = events(whole)
    assert len(everything) == 8, whole.text  # the refused click is not one of them
    assert "stops at" not in whole.text

    monkeypatch.setattr(bot.core.timeline, "PAGE_SIZE", 2)  # pages of the store
    monkeypatch.setattr(bot.core.timeline, "MAX_EVENTS", 3)
    message, first, _ = await timeline_of(stack, BOB, CHANNEL, "timeline 1h")
    assert events(first) == everything[:3]
    assert "**This file stops at 3 events**: 5 more events of this window" in first.text
    assert "gpuops audit export --since " in first.text and "for e2e-delhi" in first.text
    assert "3 events from " in message.text
    assert "the window's first; 5 more events from " in message.text
    [resume] = RESUME.findall(first.text)
    assert everything[3][0].replace(" ", "T").rstrip("Z") in resume  # the 4th event's time

    _, second, _ = await timeline_of(stack, BOB, CHANNEL, f"timeline {resume}")
    assert events(second) == everything[3:6]
    assert "2 more events of this window" in second.text
    [again] = RESUME.findall(second.text)
    _, last, _ = await timeline_of(stack, BOB, CHANNEL, f"timeline {again}")
    assert events(last) == everything[6:] and "stops at" not in last.text


async def test_the_left_out_events_are_counted_only_up_to_a_bound(
    sqlite_stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = sqlite_stack
    await _two_requests_and_a_refused_click(stack)
    monkeypatch.setattr(bot.core.timeline, "MAX_EVENTS", 2)
    monkeypatch.setattr(bot.core.timeline, "LEFT_OUT_COUNTED", 4)
    statements: list[str] = []
    engine = stack.runtime.store._engine.sync_engine

    def seen(*args: object) -> None:
        statements.append(str(args[2]))

    event.listen(engine, "before_cursor_execute", seen)
    try:
        message, file, _ = await timeline_of(stack, BOB, CHANNEL, "timeline 1h")
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert len(events(file)) == 2
    assert "**This file stops at 2 events**: more than 4 more events of this window" in file.text
    assert "more than 4 more events from " in message.text
    counts = [s for s in statements if "count(" in s.lower()]
    assert len(counts) == 1 and "LIMIT" in counts[0].upper(), counts  # read no further
