"""Workflow Builder steps (SPEC §11): a step asks for a change as a person's command would,
and ends when that request does.

``WorkflowSteps.run`` claims a step once per execution id and makes its request through
the command path (same parsing, policy, root message, approval and thread); a refusal or
invalid input ends the step at once with the answer a person would have seen.
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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from bot.core.answers import STORE_UNAVAILABLE_TEXT, Notice, Reply, error
from bot.core.forms import FormRequest
from bot.core.grammar import UsageError, parse_change
from bot.core.lifecycle import builder_steps as lifecycle
from bot.core.notifier import RequestEvent, Tone
from bot.core.requests.view import plan_lines, state_words
from bot.core.service import CommandService
from bot.core.store import (
    TERMINAL_STATES,
    ChangeRequestRecord,
    RequestState,
    StepTaken,
    Store,
    StoreUnavailable,
)
from bot.core.store.builder_steps import StepOutcome, StepRecord, StepState, StepStore
from bot.core.watch.backlog import StoreBacklog, Write
from bot.errors import GpuopsError
from bot.metrics import COMMANDS
from bot.providers.base import ChangePlan, ClusterSummary

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
_STORE_DOWN_AT_START = (
    "gpuops could not reach its state store when this step started, so it made no request "
    "and nothing was changed. Run the step again if the change is still needed."
)
_STORE_LOST_BEFORE_REQUEST = (
    "gpuops lost contact with its state store before it could make this request, so "
    "nothing was changed. Run the step again if the change is still needed."
)


@dataclass(frozen=True)
class StepStart:
    """A step as the chat platform starts it: its execution and its inputs. (The platform's
    short-lived token for it is not needed: the app completes its own steps with its own
    token, so none is kept.)"""

    execution_id: str
    project: str
    cluster_id: str
    change: str
    reason: str
    requester: str
    channel: str
    not_text: tuple[str, ...] = ()  # inputs given as something else (a number, a list…)

    def missing(self) -> list[str]:
        wanted = ("project", "cluster_id", "change", "requester", "channel")
        return [name for name in wanted if not str(getattr(self, name)).strip()]

    def problem(self) -> str | None:
        """Why the inputs cannot make a request, or None."""
        if self.not_text:
            return f"The step's input `{self.not_text[0]}` is not text; give it as a string."
        missing = self.missing()
        if missing:
            return f"The step's input `{missing[0]}` is empty; give it a value."
        return None


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


def _is_error(reply: Reply) -> bool:
    return isinstance(reply.content, Notice) and reply.content.error


def _for_later(reply: Reply) -> Reply:
    """An answer as it can be told once the store takes the step's end: "the store is
    unavailable" is then in the past (the core says it only where no request was made)."""
    content = reply.content
    if isinstance(content, Notice) and content.text == STORE_UNAVAILABLE_TEXT:
        return error(_STORE_LOST_BEFORE_REQUEST)
    return reply


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


def form_needs(form: FormRequest, required: list[str]) -> str:
    """What a step's ``change`` lacks where a command would open a form."""
    if form.kind == "single":
        return (
            "The step's `change` names no field: give `field=value …`, e.g. `num_gpus=16` "
            "(a workflow step opens no form)."
        )
    if form.action is None or not required:
        return (
            "The step's `change` names no action: give the action and its fields, e.g. "
            "`scale_cluster additional_nodes=2` (a workflow step opens no form)."
        )
    fields = ", ".join(f"`{name}`" for name in required)
    return (
        f"`{form.action}` needs {fields}: give them in the step's `change`, e.g. "
        f"`{form.action} {required[0]}=…` (a workflow step opens no form)."
    )


class StepCompleter:
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
    async def request_opened(self, record: ChangeRequestRecord) -> str:
        return ""

    async def approval_requested(self, record: ChangeRequestRecord, expire_minutes: int) -> str:
        return ""

    async def request_changed(self, record: ChangeRequestRecord, event: RequestEvent) -> None:
        if event.kind == "withdrawn":
            return  # whoever made it ends the step with what it was told (reconcile: finish)
        await self.finish(record)

    async def follow_up_note(self, record: ChangeRequestRecord, text: str, tone: Tone) -> None:
        return None

    async def result(self, record: ChangeRequestRecord, summary: ClusterSummary) -> str | None:
        return None

    async def status(
        self, record: ChangeRequestRecord, summary: ClusterSummary, as_of: datetime
    ) -> None:
        return None

    async def mirror(self, record: ChangeRequestRecord, headline: str, channel: str) -> str | None:
        return None

    async def mirror_edit(self, record: ChangeRequestRecord, channel: str, ts: str) -> None:
        return None

    async def policy_kept(self, channel: str, text: str) -> None:
        return None


class WorkflowSteps:
    """Runs a step once per execution id: the request a command would make, or the step's
    end with the answer a person would have seen."""

    def __init__(self, ops: CommandService, steps: StepStore, completer: StepCompleter) -> None:
        self.ops = ops
        self.steps = steps
        self.completer = completer

    async def run(self, start: StepStart) -> None:
        try:
            claimed = await lifecycle.claim(
                self.steps, start.execution_id, start.requester, start.channel
            )
        except StoreUnavailable as exc:
            log.warning("refused workflow step %s: %s", start.execution_id, exc)
            await self.completer.refuse(start, error(_STORE_DOWN_AT_START))
            return
        if not claimed:
            log.info("ignored workflow step %s: it was started before", start.execution_id)
            return
        try:
            async with self.ops.pacer.turn():
                answer = await self._request(start)
        except StoreUnavailable as exc:
            log.warning("workflow step %s cut off by the store: %s", start.execution_id, exc)
            answer = error(_STORE_LOST_BEFORE_REQUEST)  # said only if no request was stored
        if answer is not None and _is_error(answer):
            await self.completer.end_unrequested(start.execution_id, _for_later(answer))

    async def give_up(self, execution_id: str, reply: Reply) -> None:
        """End a step that hit an unexpected error, unless it made its request (whose end
        ends it)."""
        await self.completer.end_unrequested(execution_id, reply)

    async def _request(self, start: StepStart) -> Reply | None:
        """Make the step's request; the answer when it made none (None: nothing to say)."""
        problem = start.problem()
        if problem is not None:
            COMMANDS.labels("step", "refused").inc()
            return error(problem)
        catalog = self.ops.access.catalog
        try:
            provider = catalog.descriptor(self.ops.access.provider_of(start.project))
        except KeyError:  # not in the policy: refused as any change of it is
            provider = catalog.descriptors[0]
        try:
            command = parse_change(
                provider.verb, start.project, start.cluster_id, start.change, start.reason, catalog
            )
        except UsageError as exc:
            COMMANDS.labels("step", "refused").inc()
            return error(str(exc))
        text = f"step {provider.verb} {start.project} {start.cluster_id} {start.change}"
        try:
            outcome = await self.ops.handle_change(
                start.requester, start.channel, command, text, step=start.execution_id
            )
        except StepTaken:
            return None  # ended meanwhile (reconcile): no request was made
        if isinstance(outcome, FormRequest):
            required = [
                s.name
                for s in self.ops.forms.fields_of(outcome.project, outcome.action or "")
                if s.required and not outcome.prefill.get(s.name)
            ]
            return error(form_needs(outcome, required))
        return outcome
