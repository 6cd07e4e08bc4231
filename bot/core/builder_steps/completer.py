"""Ending Workflow Builder steps exactly once (SPEC §11).

``StepCompleter`` reads the same request events as the chat surface (a Notifier reader) and
ends a step when its request reaches a final state; ``reconcile`` finishes what a restart or
an unreachable chat service left open. The ``StepPort`` tells the chat platform.

Every end is recorded before the platform is told (a step the store could not claim is
recorded as refused, ``lifecycle.refuse``): an execution told it failed is known to the
store, so a later delivery of it runs nothing. An end the store cannot take yet is held in
memory and written, then told, once the store answers (``retry_held_forever``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Protocol

from bot.core.answers import Notice, Reply, error
from bot.core.builder_steps.start import StepStart
from bot.core.lifecycle import builder_steps as lifecycle
from bot.core.notifier import QuietNotifier, RequestEvent
from bot.core.requests.view import plan_lines, state_words
from bot.core.store import (
    TERMINAL_STATES,
    ChangeRequestRecord,
    RequestState,
    Store,
    StoreUnavailable,
)
from bot.core.store.builder_steps import StepOutcome, StepRecord, StepState, StepStore
from bot.core.watch.backlog import StoreBacklog, Write
from bot.errors import GpuopsError
from bot.providers.base import ChangePlan

log = logging.getLogger(__name__)

SUMMARY_LIMIT = 1000
RETRY_AFTER = timedelta(seconds=30)  # a completion not confirmed by then is sent again
ORPHAN_AFTER = timedelta(minutes=10)  # a claimed step with no request by then never gets one
HELD_WAIT_INITIAL = 0.2  # seconds before an end the store refused is tried again
HELD_WAIT_MAX = 10.0
_STOPPED_BEFORE_REQUEST = (
    "gpuops stopped before it could make this request; nothing was changed. "
    "Run the step again if the change is still needed."
)


class CompletionFailed(GpuopsError):
    """The platform was not told; ``retry`` when telling it again later may work."""

    def __init__(self, reason: str, *, retry: bool) -> None:
        self.reason = reason
        self.retry = retry
        super().__init__(reason)


class StepPort(Protocol):
    """Tells the chat platform how a step ended: ``step.outcome`` with ``step.payload``
    (the outputs, or ``error`` and its ``mentions``). Raises CompletionFailed."""

    async def complete(self, step: StepRecord) -> None: ...


def withdrawn(record: ChangeRequestRecord) -> bool:
    """gpuops withdrew the request before anyone could act: it could not be shown."""
    return record.state is RequestState.CANCELLED and record.decided_by == "gpuops"


def outputs_of(record: ChangeRequestRecord) -> dict[str, str]:
    """The step's outputs for a request in a final state."""
    plan = ChangePlan.model_validate(record.plan["plan"])
    summary = (
        f"{record.id} {state_words(str(record.state))}: {'; '.join(plan_lines(plan))} "
        f"on {record.project} / {record.cluster_name} ({record.cluster_id})"
    )
    if record.result_message:
        summary += f" — {record.result_message}"
    if len(summary) > SUMMARY_LIMIT:
        summary = summary[: SUMMARY_LIMIT - 1].rstrip() + "…"
    return {"request_id": record.id, "state": str(record.state), "summary": summary}


def _error_payload(reply: Reply) -> dict[str, object]:
    content = reply.content
    if isinstance(content, Notice):
        return {"error": content.text}
    return {"error": "gpuops could not make this request."}


def _withdrawn_payload(record: ChangeRequestRecord) -> dict[str, object]:
    why = record.result_message or "it could not be shown"
    return {
        "error": f"gpuops withdrew request {record.id}: {why}. Nothing was changed.",
    }


def _logged(what: str, write: Write) -> Write:
    """``write``, any failure but the store's own logged (a held write never blocks the
    ones after it)."""

    async def guarded() -> None:
        try:
            await write()
        except StoreUnavailable:
            raise
        except Exception:
            log.exception("%s failed", what)

    return guarded


class StepCompleter(QuietNotifier):
    """Ends steps exactly once: when their request ends (it reads the core's request
    events as a Notifier), when they fail at once, and on reconcile. Each end is recorded
    (``completing``) before the platform is told; one the store cannot take is held."""

    def __init__(
        self,
        steps: StepStore,
        store: Store,
        port: StepPort,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.steps = steps
        self.store = store
        self.port = port
        self.clock = clock
        self.held = StoreBacklog()
        self._holding = asyncio.Event()

    async def finish(self, record: ChangeRequestRecord) -> None:
        """End the step that made ``record``, if any, now that the request has ended."""
        if record.state not in TERMINAL_STATES or record.step_id == "":
            return  # none made it (a request without step_id, from an older replica, is looked up)
        step = await self.steps.for_request(record.id)
        if step is None or step.state is not StepState.RUNNING:
            return
        payload: Mapping[str, object]
        if withdrawn(record):  # never shown: the step failed, it did not end "cancelled"
            outcome, payload = StepOutcome.ERROR, _withdrawn_payload(record)
        else:
            outcome, payload = StepOutcome.SUCCESS, outputs_of(record)
        claimed = await lifecycle.begin_completion(self.steps, step.execution_id, outcome, payload)
        if claimed is not None:
            await self._send(claimed)

    async def fail(self, execution_id: str, reply: Reply) -> None:
        """End a running step with the answer a person would have seen."""
        claimed = await lifecycle.begin_completion(
            self.steps, execution_id, StepOutcome.ERROR, _error_payload(reply)
        )
        if claimed is not None:
            await self._send(claimed)

    async def refuse(self, start: StepStart, reply: Reply) -> None:
        """End a step that could not be claimed: recorded as refused, then told (held
        until the store takes it). A delivery of it that claimed it meanwhile ends it."""

        async def write() -> None:
            refused = await lifecycle.refuse(
                self.steps,
                start.execution_id,
                start.requester,
                start.channel,
                _error_payload(reply),
            )
            if refused is not None:
                await self._send(refused)

        await self._or_hold(f"refusal of workflow step {start.execution_id}", write)

    async def end_unrequested(self, execution_id: str, reply: Reply) -> None:
        """End a claimed step with ``reply`` unless it made a request whose end ends it (a
        withdrawn request never will): now, or once the store answers."""

        async def write() -> None:
            step = await self.steps.get(execution_id)
            if step is None or step.state is not StepState.RUNNING:
                return
            if step.request_id is not None:
                record = await self.store.get_request(step.request_id)
                if record is None or not withdrawn(record):
                    return
            await self.fail(execution_id, reply)

        await self._or_hold(f"end of workflow step {execution_id}", write)

    async def _send(self, step: StepRecord) -> None:
        try:
            await self.port.complete(step)
        except CompletionFailed as exc:
            if exc.retry:
                log.warning("step %s not ended yet (%s); retrying later", step.execution_id, exc)
                return
            log.warning("step %s could not be ended: %s", step.execution_id, exc.reason)

        async def completed() -> None:
            await lifecycle.completed(self.steps, step.execution_id)

        await self._or_hold(f"workflow step {step.execution_id} completed", completed)

    async def _or_hold(self, what: str, write: Write) -> None:
        """Write now, or hold it (in order) until the store answers."""
        await self.held.attempt(what, _logged(what, write))
        if len(self.held):
            self._holding.set()

    async def retry_held_forever(self) -> None:
        """Write what is held as soon as the store answers again (with backoff)."""
        wait = HELD_WAIT_INITIAL
        while True:
            await self._holding.wait()
            try:
                await self.held.flush()
            except StoreUnavailable:
                await asyncio.sleep(wait)
                wait = min(wait * 2, HELD_WAIT_MAX)
                continue
            wait = HELD_WAIT_INITIAL
            if not len(self.held):
                self._holding.clear()

    async def reconcile(self) -> int:
        """Finish steps left open: resend stalled completions, end steps whose request
        ended unheard, and fail steps that never got their request. How many it acted on
        (a resend Slack does not take yet is tried again next time)."""
        ended = 0
        now = self.clock()
        for step in await self.steps.unfinished():
            if step.state is StepState.COMPLETING:
                retaken = await lifecycle.retake_completion(
                    self.steps, step.execution_id, now - RETRY_AFTER
                )
                if retaken is not None:
                    await self._send(retaken)
                    ended += 1
            elif step.request_id is not None:
                record = await self.store.get_request(step.request_id)
                if record is not None and record.state in TERMINAL_STATES:
                    await self.finish(record)
                    ended += 1
            elif step.created_at < now - ORPHAN_AFTER:
                await self.fail(step.execution_id, error(_STOPPED_BEFORE_REQUEST))
                ended += 1
        return ended

    async def reconcile_forever(self, every: float) -> None:
        while True:
            try:
                await self.reconcile()
            except StoreUnavailable as exc:
                log.warning("workflow steps not reconciled: %s", exc)
            except Exception:
                log.exception("reconciling workflow steps failed")
            await asyncio.sleep(every)

    # -- the Notifier port (a reader: it shows nothing) ----------------------------------
    async def request_changed(self, record: ChangeRequestRecord, event: RequestEvent) -> None:
        if event.kind == "withdrawn":
            return  # whoever made it ends the step with what it was told (reconcile: finish)
        await self.finish(record)
