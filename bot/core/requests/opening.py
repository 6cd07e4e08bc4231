"""Opening a change request.

Check and plan it, store it, show it with its preview, ask for approval when policy says
so or run it at once; withdraw it if it cannot be shown."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta
from math import ceil

from bot.core.access import Refusal
from bot.core.answers import Reply, error, notice
from bot.core.ask.change import ChangeAsk
from bot.core.guardrails.budget import BudgetCall, BudgetGuard, BudgetOverrideJson
from bot.core.guardrails.guard import Guard, Override, guard_json
from bot.core.notifier import NotDelivered
from bot.core.requests import table, transitions
from bot.core.requests.beside import OPEN_STATES, beside_note, duplicate_of
from bot.core.requests.budget_override import announce_budget_override, budget_overridden
from bot.core.requests.deps import RequestDeps
from bot.core.requests.execution import Execution, Posted
from bot.core.requests.open_approvals import approvals_as_stored, requirement_at_open
from bot.core.requests.outcomes import Result
from bot.core.requests.schedule import Schedule, ScheduleError, when_text
from bot.core.requests.transitions import Change, mirror, settle
from bot.core.requests.view import state_words
from bot.core.staged.asking import plan_staged, run_staged, staged_preview
from bot.core.staged.plan import StagedPlan
from bot.core.store import ChangeRequestRecord, RequestState, StoreUnavailable
from bot.metrics import APPROVALS_PENDING, CHANGE_REQUESTS
from bot.providers.base import ChangePlan
from bot.redact import redact

log = logging.getLogger(__name__)

# Where a message was posted, when the store could not take it: written again with backoff.
NOTE_WAIT_INITIAL = 0.2
NOTE_WAIT_MAX = 5.0
NOTE_GIVE_UP_SECONDS = 6 * 3600.0


def ran_without_store(request_id: str, result: Result | None) -> Reply:
    """The answer to a change run just now whose outcome the store could not give back."""
    if result is None:
        return error(
            f"Request {request_id}: gpuops lost contact with its database while running it "
            "and cannot tell here whether it was sent. Do not request it again before its "
            "thread shows the result."
        )
    if not result.sent:
        return error(f"Request {request_id} was not sent: {result.message}")
    outcome = state_words(str(result.to))
    said = result.message.rstrip().rstrip(".")
    return notice(
        f"Request {request_id} was sent — {outcome}: {said}. gpuops lost contact "
        "with its database afterwards; its thread shows the result once it is recorded."
    )


class Opening:
    """Turns a checked change into a request that waits for approval or runs (the ``open``
    transitions)."""

    def __init__(self, deps: RequestDeps, execution: Execution) -> None:
        self.deps = deps
        self.execution = execution
        self.guard = Guard(deps.access)
        self.budget = BudgetGuard(deps.access)

    async def request_change(self, ask: ChangeAsk) -> Reply:
        """Check at request (the run time, the plan against the cluster as it is now, the
        guardrails), store and show a change request. The ask was checked where it was
        asked (its role and cluster: bot.core.ask.change); its ``step`` (a workflow step's
        function execution id) is linked to the request as it is stored."""
        access = self.deps.access
        now = self.deps.clock()
        project, user, channel = ask.project, ask.user, ask.channel
        try:
            run_at = _run_at(ask.schedule, self.deps.clock())
            state = await access.fetch(project, ask.cluster_id)
            plan = access.make_plan(project, state, ask.action, ask.inputs)
            size = self.guard.size(state, plan, now)
            self.guard.check(project, plan.kinds, size, now, overridden=True)  # limits first
            budget = await self.budget.judge(project, size, now)
            over_budget = await budget_overridden(self.deps, ask, budget)
            overridden = await self.guard.override(
                user,
                channel,
                project,
                plan.kinds,
                now,
                ask.override,
                budget_overridden=bool(over_budget),
            )
            self.guard.check(project, plan.kinds, size, now, overridden=overridden is not None)
            staged = ask.staging and plan_staged(ask.staging, access, state, plan, ask.inputs, size)
        except Refusal as refusal:
            CHANGE_REQUESTS.labels(access.provider_of(project), "refused").inc()
            return await access.refuse(
                user,
                channel,
                refusal,
                project=project,
                cluster_id=ask.cluster_id,
                command=ask.command,
            )
        stored: dict[str, object] = {
            "plan": plan.model_dump(mode="json"),
            "inputs": dict(plan.body),
        }
        guard = stored["guard"] = guard_json(size, overridden)
        if ask.via is not None:  # shown verbatim in Slack before anyone confirms
            stored["proposed"] = {str(k): str(v) for k, v in ask.inputs.items()}
        stored.update({"staged": staged.to_json()} if isinstance(staged, StagedPlan) else {})
        if budget.band != "ok":
            guard["budget"] = budget.as_json()
        if over_budget:
            guard["budget_override"] = over_budget
        return await self._open(ask, plan, stored, overridden, run_at, budget, over_budget)

    async def _open(
        self,
        ask: ChangeAsk,
        plan: ChangePlan,
        stored: dict[str, object],
        overridden: Override | None,
        run_at: datetime | None,
        budget: BudgetCall,
        over_budget: BudgetOverrideJson | None,
    ) -> Reply:
        deps = self.deps
        user, channel, reason, step, revert_of = (
            ask.user,
            ask.channel,
            ask.reason,
            ask.step,
            ask.revert_of,
        )
        requirement = requirement_at_open(deps, plan, budget)
        needs_approval = requirement is not None
        # An agent's proposal waits for its requester's Confirm first (SPEC §15), even when
        # the policy would let it run at once: the agent's ask is not the person's decision.
        awaiting = ask.via is not None
        held = needs_approval or awaiting
        expire_minutes = deps.policy.approvals.expire_after_minutes
        expires_at = deps.clock() + timedelta(minutes=expire_minutes)
        if run_at is not None:  # approved before its time, or it expires then
            expire_minutes = max(ceil((run_at - deps.clock()).total_seconds() / 60), 1)
            expires_at = run_at
        agent = {"via": ask.via, "client": ask.client, "token": ask.token} if awaiting else {}
        opened = Change(
            table.OPEN if held else table.OPEN_APPROVED,
            user,
            outcome=str(RequestState.PENDING if held else RequestState.APPROVED),
            detail={
                "preview": staged_preview(stored, plan),
                "kinds": plan.kinds,
                "reason": reason or "",
                "channel": channel,
                **({"workflow_step": step} if step else {}),
                "revert_of": revert_of or "",
                "run_at": run_at.isoformat() if run_at else "",
                **agent,
                **({"confirm": "awaiting"} if awaiting else {}),
            },
        )
        approvals = await approvals_as_stored(deps, requirement, plan.project, channel, user)
        record, others = await transitions.open_request(
            deps,
            opened,
            OPEN_STATES,
            provider=plan.provider,
            project=plan.project,
            cluster_id=plan.cluster_id,
            cluster_name=plan.cluster_name,
            action=plan.action,
            plan=stored,
            kinds=plan.kinds,
            needs_approval=needs_approval,
            requester=user,
            channel=channel,
            reason=reason,
            expires_at=expires_at if held else None,
            step=step,
            approvals=approvals,
            revert_of=revert_of,
            run_at=run_at,
            via=ask.via,
            client=ask.client,
            confirm="awaiting" if awaiting else None,
        )
        duplicate = await duplicate_of(deps, record, others)
        if duplicate is not None:
            await self._withdraw(record, f"it asks for what {duplicate.id} already asks for")
            CHANGE_REQUESTS.labels(plan.provider, "refused").inc()
            refusal = Refusal(
                f"{duplicate.id} already asks for this on {plan.cluster_name} "
                f"({plan.cluster_id}): {plan.preview_text()} "
                f"({state_words(str(duplicate.state))}). Approve or cancel it rather than "
                "asking twice.",
                kind="duplicate",
            )
            return await self.deps.access.refuse(
                user, channel, refusal, project=plan.project, cluster_id=plan.cluster_id
            )
        if overridden is not None:
            await self._overridden(record, overridden)
        if over_budget:
            await announce_budget_override(self.deps, record, over_budget)
        beside = beside_note(record, others)
        try:
            root_ts = await deps.notifier.request_opened(record)
            if held or run_at is not None:
                record = await self._note(record, root_ts=root_ts)
            else:  # run now: stored with its start (or refusal), one transaction fewer
                record = record.model_copy(update={"root_ts": root_ts})
            if needs_approval and not awaiting:  # a proposal asks once it is confirmed
                # Without the prompt nobody can approve it: withdraw it rather than let it
                # wait for an approval that cannot come.
                prompt_ts = await deps.notifier.approval_requested(record, expire_minutes)
                record = await self._note(record, prompt_ts=prompt_ts)
                if deps.access.oncall_copies is not None:  # SPEC §16: DMs to who is on call
                    await deps.access.oncall_copies.opened(record)
        except NotDelivered as exc:
            shown = "the approval prompt" if record.root_ts else "in the channel"
            await self._withdraw(record, f"could not post {shown} ({exc.reason})")
            return error(f"{exc.user_message} Nothing was changed (request {record.id} withdrawn).")
        if beside:
            await deps.notifier.follow_up_note(record, beside, "warning")
        also = f"\n{beside}" if beside else ""
        when = "" if run_at is None else f", scheduled for {when_text(run_at, deps.clock())}"
        if awaiting:
            APPROVALS_PENDING.inc()
            await mirror(deps, record, "Change proposed by an agent", its_copy=True)
            then = ", then for approval" if needs_approval else ""
            return notice(
                f"Request {record.id} is waiting for <@{user}> to confirm it in the thread"
                f"{then}{when}: {plan.preview_text()}{also}"
            )
        if needs_approval:
            APPROVALS_PENDING.inc()
            await mirror(deps, record, "Change requested", its_copy=True)
            return notice(
                f"Request {record.id} is waiting for approval in the thread{when}: "
                f"{staged_preview(stored, plan)}{also}"
            )
        if run_at is not None:
            await mirror(deps, record, "Change requested (no approval needed)", its_copy=True)
            preview = staged_preview(stored, plan)
            return notice(f"Request {record.id} is approved{when}: {preview}{also}")
        # Run now: the notify channel hears of it once, when it has ended (every way it
        # can end is mirrored).
        return await self._run(record, user, beside)

    async def _run(self, record: ChangeRequestRecord, user: str, beside: str | None) -> Reply:
        """Run it now and say how it went here too (the thread may be out of the bot's
        reach by now). Once the call may have been sent, the answer says only what is known
        of it: never "nothing was changed" because the store went away afterwards."""
        result: Result | None = None
        posted = Posted({"root_ts": record.root_ts})
        if "staged" in record.plan:  # its plan runs in the background: the thread tells
            return await run_staged(self.execution.execute, record, user, posted, beside)
        try:
            result = await self.execution.execute(
                record.id, actor=user, record=record, posted=posted
            )
            if result is not None and (record.id in self.deps.in_flight or not result.sent):
                return ran_without_store(record.id, result)  # kept until the store is back
            final = _as_ended(record, result) or await self.deps.store.get_request(record.id)
        except StoreUnavailable as exc:
            log.warning("change %s: its outcome could not be read back: %s", record.id, exc)
            return ran_without_store(record.id, result)
        finally:
            if not posted.stored:  # it did not start here: where it was posted, on its own
                await self._note(record, **posted.fields)
        final = final or record
        outcome = state_words(str(final.state))
        if final.result_message:
            outcome += f": {final.result_message}"
        ran = f"Request {record.id} ran — see the thread for the result ({outcome})."
        return notice(ran + (f"\n{beside}" if beside else ""))

    async def _note(self, record: ChangeRequestRecord, **posted: object) -> ChangeRequestRecord:
        """Store where a message of the request was posted; with the store unavailable,
        keep writing it until it is back (its edits and replies need it), and go on."""
        try:
            return await self.deps.store.update_fields(record.id, fence=None, **posted) or record
        except StoreUnavailable as exc:
            log.warning("request %s: where it was posted is kept for the store: %s", record.id, exc)
            self.deps.tasks.spawn(self._note_when_back(record.id, posted), f"posted-{record.id}")
            return record.model_copy(update=posted)

    async def _note_when_back(self, request_id: str, posted: dict[str, object]) -> None:
        wait = NOTE_WAIT_INITIAL
        give_up = time.monotonic() + NOTE_GIVE_UP_SECONDS
        while time.monotonic() < give_up:
            await asyncio.sleep(wait)
            try:
                await self.deps.store.update_fields(request_id, fence=None, **posted)
            except StoreUnavailable:
                wait = min(wait * 2, NOTE_WAIT_MAX)
                continue
            log.info("request %s: where it was posted is stored now", request_id)
            return
        log.error("request %s: gave up storing where it was posted", request_id)

    async def _overridden(self, record: ChangeRequestRecord, overridden: Override) -> None:
        """Audit an admin's freeze override and announce it in the notify channel."""
        await self.deps.access.audit(
            overridden.by,
            "freeze_override",
            project=record.project,
            cluster_id=record.cluster_id,
            request_id=record.id,
            outcome=overridden.freeze,
            reason=overridden.reason,
            until=overridden.until,
        )
        headline = (
            f"Freeze override: <@{overridden.by}> overrode {overridden.freeze} "
            f"(until {overridden.until}). Reason: {overridden.reason}"
        )
        await mirror(self.deps, record, headline)

    async def _withdraw(self, record: ChangeRequestRecord, why: str) -> None:
        withdrawn = Change(
            table.WITHDRAW,
            "gpuops",
            outcome="cancelled",
            text=why,
            fields={"result_message": why, "decided_by": "gpuops", "decision_note": why},
            detail={"reason": why},
            unmirrored=True,  # never shown anywhere
        )
        await settle(self.deps, record, withdrawn)


def _as_ended(record: ChangeRequestRecord, result: Result | None) -> ChangeRequestRecord | None:
    """The request as its recorded result left it, without reading it back (None when
    the execution did not say)."""
    if result is None:
        return None
    return record.model_copy(update={"state": result.to, "result_message": redact(result.message)})


def _run_at(schedule: Schedule | None, now: datetime) -> datetime | None:
    """When a scheduled change runs; a Refusal naming the bounds when it cannot."""
    if schedule is None:
        return None
    try:
        return schedule.resolve(now)
    except ScheduleError as exc:
        raise Refusal(str(exc), kind="schedule", field="run_at") from None
