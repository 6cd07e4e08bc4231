"""The store failing under the workflow, on the core harness (SPEC §5e), with the outage
kit of the reliability tests (every transaction the store opens refused): a result the
store could not take is kept, said, and recorded once it is back; a change the store
stopped before sending is never sent and ends failed; a request cannot be opened, nor a
decision taken, without the store. (The outage matrix over real HTTP stays in tests/faults.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.core.answers import STORE_UNAVAILABLE_TEXT
from bot.core.requests.outcomes import Result
from bot.core.store import AuditRow, StoreUnavailable
from bot.core.store import RequestState as S
from tests.support.core_harness import BOB, DAVE, Core
from tests.support.reliability import StoreOutage

SCALE = {"additional_nodes": "1"}


async def test_a_result_the_store_could_not_take_is_recorded_once_it_is_back(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    outage = StoreOutage(core.store)
    hang = core.e2e.script.hang("apply")
    deciding = asyncio.create_task(core.approve(BOB, opened.id))
    await hang.entered.wait()
    outage.start()  # the provider is answering; the store is gone
    hang.release()
    assert await deciding is None
    [kept] = core.notifier.notes(opened.id)
    assert kept.startswith("The provider answered: Adding 1 node(s). gpuops lost contact")
    assert core.notifier.events(opened.id) == ["approved", "executing"]
    outage.end()
    await core.workflow.drain()
    record = await core.record(opened.id)
    assert record.state is S.SUCCEEDED and record.result_message == "Adding 1 node(s)"
    [finished] = [t for t in core.notifier.of(opened.id, "request_changed") if t.kind == "finished"]
    assert finished.text is not None and finished.text.startswith(
        "gpuops lost contact with its database while sending this change; the result, "
        "recorded now that it is back: Adding 1 node(s)"
    )
    assert (await core.events(opened.id)).count("result") == 1
    assert len(core.e2e.script.of("apply")) == 1
    assert await core.store.cluster_holder("e2e", "e2e-delhi", "101") is None


async def test_a_result_whose_write_landed_but_whose_answer_was_lost_is_still_told(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finish's transaction commits, but its answer never reaches gpuops (the database
    went silent right after): the result is kept as unrecorded and said so. Its replay
    finds it recorded already, and the thread is told the result once, as promised."""
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    real = core.store.finish_execution
    calls = 0

    async def answer_lost(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        done = await real(*args, **kwargs)
        if calls == 1:
            raise StoreUnavailable(core.store.database, "no answer within 0.5 s")
        return done

    monkeypatch.setattr(core.store, "finish_execution", answer_lost)
    assert await core.approve(BOB, opened.id) is None
    await core.workflow.drain()
    assert calls == 2  # the replay
    [kept] = core.notifier.notes(opened.id)
    assert "it will record the result and confirm here" in kept
    record = await core.record(opened.id)
    assert record.state is S.SUCCEEDED and record.result_message == "Adding 1 node(s)"
    finished = [t for t in core.notifier.of(opened.id, "request_changed") if t.kind == "finished"]
    assert len(finished) == 1 and finished[0].text is not None
    assert finished[0].text.startswith(
        "gpuops lost contact with its database while sending this change; its result was "
        "recorded, confirmed now that the database is back: Adding 1 node(s)"
    )
    assert core.notifier.methods(opened.id).count("mirror") == 2  # requested, then done
    assert (await core.events(opened.id)).count("result") == 1
    assert await core.store.cluster_holder("e2e", "e2e-delhi", "101") is None


async def test_a_lost_answer_to_a_correction_is_told_as_the_correction(core: Core) -> None:
    """Recovery marked the change ``unknown``; the kept result's write replaced that, but
    its answer was lost. Its replay finds it recorded and tells it as a correction."""
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    store = core.store
    assert await store.transition(opened.id, from_states={S.PENDING}, to=S.APPROVED)
    assert await store.transition(opened.id, from_states={S.APPROVED}, to=S.EXECUTING)
    interrupted = AuditRow(actor="gpuops", event="result", outcome="unknown", request_id=opened.id)
    assert await store.transition(
        opened.id, from_states={S.EXECUTING}, to=S.UNKNOWN, audit=interrupted
    )
    landed = await store.transition(
        opened.id, from_states={S.UNKNOWN}, to=S.SUCCEEDED, result_message="Adding 1 node(s)"
    )
    assert landed is not None
    result = Result(S.SUCCEEDED, "Adding 1 node(s)")
    assert await core.workflow.execution.recorder.record(landed, None, result, late=True)
    finished = [t for t in core.notifier.of(opened.id, "request_changed") if t.kind == "finished"]
    assert len(finished) == 1 and finished[0].text is not None
    assert finished[0].text.startswith(
        "Correction: this change was marked unknown while gpuops could not reach its database."
    )


async def test_a_change_the_store_stopped_before_sending_is_never_sent(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    outage = StoreOutage(core.store)
    told = core.notifier.hang("request_changed")  # "approved": recorded, not yet started
    deciding = asyncio.create_task(core.approve(BOB, opened.id))
    await told.entered.wait()
    outage.start()
    told.release()
    await deciding
    outage.end()
    assert (await core.record(opened.id)).state is S.APPROVED
    assert core.e2e.script.of("apply") == []
    core.clock.advance(minutes=1)  # past a lease period: nobody is sending it
    assert await core.workflow.recover_interrupted() == 1
    record = await core.record(opened.id)
    assert record.state is S.FAILED and record.result_message is not None
    assert "nothing was sent" in record.result_message
    assert core.e2e.script.of("apply") == []


async def test_a_request_cannot_be_opened_without_the_store(core: Core) -> None:
    outage = StoreOutage(core.store)
    outage.start()
    told = await core.answer(DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=1")
    assert told == STORE_UNAVAILABLE_TEXT
    outage.end()
    assert core.notifier.told == [] and core.e2e.script.of("apply") == []
    assert await core.store.list_requests() == []


async def test_a_decision_without_the_store_is_refused_and_changes_nothing(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    outage = StoreOutage(core.store)
    outage.start()
    told = await core.approve(BOB, opened.id)
    assert told is not None and STORE_UNAVAILABLE_TEXT in str(told)
    outage.end()
    assert (await core.record(opened.id)).state is S.PENDING
    assert core.e2e.script.of("apply") == []
