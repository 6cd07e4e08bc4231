"""Sending an approved change on the core harness (SPEC §5): the provider's answer or error
decides the end state, never retried; one change at a time per cluster; shutdown waits for
a change being sent; a failure while starting leaves it to recovery; recovery ends what a
dead executor left, and leaves alone what a live one holds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from bot.core.store import RequestState as S
from bot.core.store import Started, StartedHow
from bot.providers.errors import (
    ProviderAuthError,
    ProviderError,
    ProviderNotFound,
    ProviderRateLimited,
    ProviderRequestError,
    ProviderServerError,
)
from tests.support.core_harness import BOB, CAROL, CHANNEL, DAVE, Core

SCALE = {"additional_nodes": "1"}
RESTART_NOTE = "The gpuops replica sending this change stopped answering"


def quota(kind: type[ProviderError], status: int, *, applied: bool) -> ProviderError:
    return kind("cluster quota exceeded", provider="e2e", status=status, may_have_applied=applied)


@pytest.mark.parametrize(
    ("error", "state", "says"),
    [
        (
            quota(ProviderServerError, 500, applied=True),
            S.UNKNOWN,
            "The provider may have applied the change",
        ),
        (quota(ProviderServerError, 503, applied=False), S.FAILED, "Nothing was changed."),
        (quota(ProviderRequestError, 400, applied=False), S.FAILED, "Nothing was changed."),
        (quota(ProviderAuthError, 401, applied=False), S.FAILED, "Nothing was changed."),
        (quota(ProviderNotFound, 404, applied=False), S.FAILED, "Nothing was changed."),
        (quota(ProviderRateLimited, 429, applied=False), S.FAILED, "Nothing was changed."),
        (quota(ProviderError, 504, applied=True), S.UNKNOWN, "It will not be re-run."),
    ],
)
async def test_a_provider_error_while_sending_ends_in_the_right_state_never_retried(
    core: Core, error: ProviderError, state: S, says: str
) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    core.e2e.script.fail("apply", error)
    assert await core.approve(BOB, opened.id) is None
    record = await core.record(opened.id)
    assert record.state is state and record.result_message is not None
    assert says in record.result_message and "cluster quota exceeded" in record.result_message
    assert len(core.e2e.script.of("apply")) == 1  # never retried
    assert (await core.trail(opened.id))[-1] == (DAVE, "result", str(state))
    [finished] = [t for t in core.notifier.of(opened.id, "request_changed") if t.kind == "finished"]
    assert finished.state is state and finished.text == record.result_message
    assert core.notifier.mirrors(opened.id)[-1].startswith(
        "Change outcome unknown" if state is S.UNKNOWN else "Change failed"
    )
    assert await core.store.cluster_holder("e2e", "e2e-delhi", "101") is None


async def test_an_unknown_outcome_shows_the_cluster_as_it_is_now(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    core.e2e.script.fail("apply", quota(ProviderServerError, 500, applied=True))
    await core.approve(BOB, opened.id)
    [shown] = core.notifier.of(opened.id, "result")
    assert shown.summary is not None and shown.summary.cluster_id == "101"
    assert core.e2e.script.of("get_cluster")[-1].cluster_id == "101"


async def test_a_crash_inside_the_adapter_ends_unknown_never_hanging(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    core.e2e.script.fail("apply", KeyError("boom"))
    await core.approve(BOB, opened.id)
    record = await core.record(opened.id)
    assert record.state is S.UNKNOWN and record.result_message is not None
    assert "internal error while sending the change (KeyError)" in record.result_message
    assert (await core.trail(opened.id))[-1] == (DAVE, "result", "unknown")


async def test_one_change_at_a_time_per_cluster(any_core: Core) -> None:
    core = any_core
    first = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    second = await core.open(DAVE, "e2e-delhi", "101", "restart_workers")
    hang = core.e2e.script.hang("apply")
    sending = asyncio.create_task(core.approve(BOB, first.id))
    await hang.entered.wait()
    assert (await core.record(first.id)).state is S.EXECUTING
    await core.approve(CAROL, second.id)
    record = await core.record(second.id)
    assert record.state is S.FAILED and record.result_message is not None
    assert f"another change ({first.id}) is running on 101" in record.result_message
    assert "request again when it has finished" in record.result_message
    assert (await core.trail(second.id))[-1] == ("gpuops", "refused", "cluster_busy")
    hang.release()
    assert await sending is None
    assert (await core.record(first.id)).state is S.SUCCEEDED
    assert await core.store.cluster_holder("e2e", "e2e-delhi", "101") is None
    assert [c.body for c in core.e2e.script.of("apply")] == [
        {"action": "scale_cluster", "additional_nodes": 1}
    ]


async def test_a_change_on_another_cluster_is_not_held_up(core: Core) -> None:
    first = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    other = await core.open(DAVE, "e2e-delhi", "103", "restart_workers")
    hang = core.e2e.script.hang("apply")
    sending = asyncio.create_task(core.approve(BOB, first.id))
    await hang.entered.wait()
    await core.approve(CAROL, other.id)
    assert (await core.record(other.id)).state is S.SUCCEEDED
    hang.release()
    await sending
    assert (await core.record(first.id)).state is S.SUCCEEDED


async def test_stopping_lets_a_change_being_sent_finish(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    hang = core.e2e.script.hang("apply")
    sending = asyncio.create_task(core.approve(BOB, opened.id))
    await hang.entered.wait()
    waiting = asyncio.create_task(core.workflow.wait_for_executions(5.0))
    await asyncio.sleep(0)
    assert not waiting.done()
    hang.release()
    assert await waiting == set()
    await sending
    assert (await core.record(opened.id)).state is S.SUCCEEDED
    assert len(core.e2e.script.of("apply")) == 1


async def test_wait_for_executions_gives_up_after_its_grace(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "103", "restart_cluster")
    hang = core.e2e.script.hang("apply")
    sending = asyncio.create_task(core.approve(BOB, opened.id))
    await hang.entered.wait()
    assert await core.workflow.wait_for_executions(0.05) == {opened.id}
    hang.release()
    await sending
    assert (await core.record(opened.id)).state is S.SUCCEEDED


async def test_a_slow_provider_still_ends_the_change(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    core.e2e.script.delay("apply", 0.05)
    await core.approve(BOB, opened.id)
    assert (await core.record(opened.id)).state is S.SUCCEEDED


_FAILING_START_AUDIT = """CREATE TRIGGER test_failing_start_audit BEFORE INSERT ON gpuops_audit
 WHEN NEW.event = 'executing' BEGIN SELECT RAISE(ABORT, 'the audit table went away'); END"""


async def test_a_failure_while_starting_a_change_leaves_it_to_recovery(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start's audit entry fails in the database: the whole start (lease, lock,
    ``executing``: one statement and its triggers) is rolled back with it, nothing is sent,
    and recovery ends the approved change as never sent."""
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    async with core.store.engine.begin() as conn:
        await conn.execute(text(_FAILING_START_AUDIT))
    with pytest.raises(IntegrityError, match="the audit table went away"):
        await core.workflow.decide(
            user=BOB, channel=CHANNEL, request_id=opened.id, decision="approve"
        )
    async with core.store.engine.begin() as conn:
        await conn.execute(text("DROP TRIGGER test_failing_start_audit"))
    assert core.e2e.script.of("apply") == []  # never sent
    # this process no longer counts it as being sent, and holds neither lease nor lock
    assert await core.workflow.wait_for_executions(0.1) == set()
    assert (await core.record(opened.id)).state is S.APPROVED
    assert await core.store.cluster_holder("e2e", "e2e-delhi", "101") is None
    assert await core.store.get_lease(f"exec:{opened.id}") is None
    core.clock.advance(seconds=core.workflow.deps.exec_lease_seconds + 1)
    assert await core.workflow.recover_interrupted() == 1
    record = await core.record(opened.id)
    assert record.state is S.FAILED and record.result_message is not None
    assert "nothing was sent" in record.result_message
    assert core.e2e.script.of("apply") == []


# -- recovery -------------------------------------------------------------------------------


async def executing_without_executor(core: Core, cluster_id: str = "101") -> str:
    """A change left ``executing`` by an executor that is gone (no live lease)."""
    opened = await core.open(DAVE, "e2e-delhi", cluster_id, "scale_cluster", SCALE)
    store = core.store
    assert await store.transition(opened.id, from_states={S.PENDING}, to=S.APPROVED, decided_by=BOB)
    assert await store.lock_cluster("e2e", "e2e-delhi", cluster_id, opened.id)
    assert await store.transition(opened.id, from_states={S.APPROVED}, to=S.EXECUTING)
    return opened.id


async def test_a_change_whose_executor_is_gone_ends_unknown_once_never_rerun(
    any_core: Core,
) -> None:
    core = any_core
    request_id = await executing_without_executor(core)
    assert await core.workflow.recover_interrupted() == 1
    record = await core.record(request_id)
    assert record.state is S.UNKNOWN and record.result_message is not None
    assert (
        RESTART_NOTE in record.result_message and "it will not be re-run" in record.result_message
    )
    [told] = core.notifier.of(request_id, "request_changed")[-1:]
    assert told.kind == "interrupted" and told.state is S.UNKNOWN
    assert core.notifier.mirrors(request_id)[-1].startswith("Change outcome unknown")
    assert (await core.trail(request_id))[-1] == ("gpuops", "result", "unknown")
    assert await core.workflow.recover_interrupted() == 0  # once
    assert core.e2e.script.of("apply") == []
    late = await core.approve(CAROL, request_id)
    assert late is not None and "outcome unknown" in str(late)
    assert core.e2e.script.of("apply") == []


async def test_a_change_approved_by_a_bot_that_died_before_sending_it_is_closed(
    any_core: Core,
) -> None:
    core = any_core
    orphan = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    following = await core.open(DAVE, "e2e-delhi", "101", "restart_workers")
    store = core.store
    assert await store.transition(orphan.id, from_states={S.PENDING}, to=S.APPROVED, decided_by=BOB)
    assert await store.lock_cluster("e2e", "e2e-delhi", "101", orphan.id)
    assert await core.workflow.recover_interrupted() == 0  # just approved: in hand
    later = await core.replica("core-b")
    core.clock.advance(minutes=1)
    assert await later.recover_interrupted() == 1
    record = await core.record(orphan.id)
    assert record.state is S.FAILED and record.result_message is not None
    assert "nothing was sent" in record.result_message
    assert await store.cluster_holder("e2e", "e2e-delhi", "101") is None
    assert (await core.trail(orphan.id))[-1] == ("gpuops", "result", "failed")
    await core.approve(CAROL, following.id)
    assert (await core.record(following.id)).state is S.SUCCEEDED
    assert [c.body for c in core.e2e.script.of("apply")] == [{"action": "restart_workers"}]


async def test_a_replica_leaves_alone_a_change_another_live_replica_is_sending(
    any_core: Core,
) -> None:
    core = any_core
    other = await core.replica("core-b")
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    hang = core.e2e.script.hang("apply", then=quota(ProviderError, 504, applied=True))
    sending = asyncio.create_task(core.approve(BOB, opened.id))
    await hang.entered.wait()
    assert await other.recover_interrupted() == 0
    assert await core.workflow.recover_interrupted() == 0  # its own: in hand
    assert (await core.record(opened.id)).state is S.EXECUTING
    hang.release()
    await sending
    record = await core.record(opened.id)
    assert record.state is S.UNKNOWN and record.result_message is not None
    assert RESTART_NOTE not in record.result_message
    assert "may have applied" in record.result_message
    assert len(core.e2e.script.of("apply")) == 1


async def test_a_sweep_at_the_moment_a_change_starts_does_not_call_it_interrupted(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other replica's sweeper looks right after the request became ``executing``: the
    executor already holds its lease then (they are one transaction)."""
    other = await core.replica("core-b")
    swept: list[int] = []
    start = core.store.start_execution

    async def then_sweep(request_id: str, **kwargs: Any) -> Started:
        started = await start(request_id, **kwargs)
        if started.how is StartedHow.STARTED:
            swept.append(await other.recover_interrupted())
        return started

    monkeypatch.setattr(core.store, "start_execution", then_sweep)
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    await core.approve(BOB, opened.id)
    assert swept == [0]
    assert (await core.record(opened.id)).state is S.SUCCEEDED
    assert len(core.e2e.script.of("apply")) == 1


async def test_a_pending_request_survives_another_process_and_runs_once(any_core: Core) -> None:
    core = any_core
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    after_restart = await core.replica("core-2")
    assert await after_restart.recover_interrupted() == 0
    await after_restart.decide(user=BOB, channel=CHANNEL, request_id=opened.id, decision="approve")
    assert (await core.record(opened.id)).state is S.SUCCEEDED
    assert await core.events(opened.id) == ["requested", "approved", "executing", "result"]
    assert len(core.e2e.script.of("apply")) == 1


async def test_the_sweeper_forgets_deliveries_after_a_day(core: Core) -> None:
    assert await core.store.remember_delivery("event:Ev0001")
    await core.workflow.sweep_once()
    assert not await core.store.remember_delivery("event:Ev0001")  # still remembered today
    core.clock.advance(days=2)
    await core.workflow.sweep_once()
    assert await core.store.remember_delivery("event:Ev0001")  # pruned: seen afresh
