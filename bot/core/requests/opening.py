"""Opening a change request.

Check and plan it, store it, show it with its preview, ask for approval when policy says
so or run it at once; withdraw it if it cannot be shown."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from math import ceil
from typing import Any

from bot.core.access import Refusal
from bot.core.answers import Reply, error, notice
from bot.core.ask.change import ChangeAsk
from bot.core.guardrails.approvals import (
    Requirement,
    requirement_for,
    who_to_ask,
    with_budget,
)
from bot.core.guardrails.budget import BudgetGuard
from bot.core.guardrails.guard import Guard, Override, guard_json
from bot.core.notifier import NotDelivered
from bot.core.requests import table, transitions
from bot.core.requests.budget_override import announce_budget_override, budget_overridden
from bot.core.requests.deps import RequestDeps
from bot.core.requests.execution import Execution, Posted
from bot.core.requests.outcomes import Result
from bot.core.requests.schedule import Schedule, ScheduleError, when_text
from bot.core.requests.transitions import Change, mirror, settle
from bot.core.requests.view import STALE_AT_APPROVAL, state_words
from bot.core.staged.asking import plan_staged, run_staged, staged_preview
from bot.core.staged.plan import StagedPlan
from bot.core.store import ChangeRequestRecord, OpenBeside, RequestState, StoreUnavailable
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


_OPEN = frozenset({RequestState.PENDING, RequestState.APPROVED, RequestState.EXECUTING})


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
        return await self._open(ask, plan, stored, overridden, run_at)

    async def _approvals(
        self, requirement: Requirement | None, project: str, channel: str, requester: str
    ) -> dict[str, object] | None:
        """The approval requirement as stored, with whom its prompt asks: under on-call
        approvers (SPEC §16), who is on call now (the prompt names them; eligibility is
        judged again at each click)."""
        if requirement is None:
            return None
        ask = who_to_ask(
            self.deps.policy, requirement, project=project, channel=channel, requester=requester
        )
        gate = self.deps.access.oncall
        if not requirement.oncall or gate is None:
            return {**requirement.as_json(), "ask": ask}
        now = self.deps.clock()
        on_call = await gate.now(requirement, opened_at=now, now=now)
        ask = {
            "users": [u for u in on_call.slack_ids if u != requester],
            "usergroups": list(requirement.usergroups),
        }
        return {**requirement.as_json(), "ask": ask, "oncall_now": on_call.as_json()}

    async def _duplicate_of(
        self, record: ChangeRequestRecord, others: list[OpenBeside]
    ) -> ChangeRequestRecord | None:
        """An older open request on the cluster asking for the same change (the same action
        with the same fields): the re-check at approval cannot tell them apart when the
        change leaves the cluster as it was (a restart), so both would run. Read only when
        others are open (the opening's own transaction told which); of two opened at once
        that see each other, the younger yields."""
        if not others:
            return None
        open_here = await self.deps.store.list_requests(
            states=_OPEN, project=record.project, cluster_id=record.cluster_id
        )
        inputs = record.plan.get("inputs")
        older = [
            other
            for other in open_here
            if other.id != record.id
            and other.action == record.action
            and other.plan.get("inputs") == inputs
            and (other.created_at, other.id) < (record.created_at, record.id)
        ]
        return min(older, key=lambda o: (o.created_at, o.id), default=None)

    async def _open(
        self,
        ask: ChangeAsk,
        plan: ChangePlan,
        stored: dict[str, object],
        overridden: Override | None,
        run_at: datetime | None,
    ) -> Reply:
        deps = self.deps
        user, channel, reason, step, revert_of = (
            ask.user,
            ask.channel,
            ask.reason,
            ask.step,
            ask.revert_of,
        )
        requirement = requirement_for(deps.policy, plan.project, plan.kinds)
        budget = _guard_of(stored).get("budget") or {}
        if budget.get("band") == "approval":  # past approval_at: one more approver (§13)
            requirement = with_budget(requirement, budget["lines"], plan.kinds)
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
        approvals = await self._approvals(requirement, plan.project, channel, user)
        record, others = await transitions.open_request(
            deps,
            opened,
            _OPEN,
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
        duplicate = await self._duplicate_of(record, others)
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
        over_budget = _guard_of(stored).get("budget_override")
        if over_budget:
            await announce_budget_override(self.deps, record, over_budget)
        beside = _beside_note(record, others)
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

    async def _note(self, record: ChangeRequestRecord, **posted: Any) -> ChangeRequestRecord:
        """Store where a message of the request was posted; with the store unavailable,
        keep writing it until it is back (its edits and replies need it), and go on."""
        try:
            return await self.deps.store.update_fields(record.id, **posted) or record
        except StoreUnavailable as exc:
            log.warning("request %s: where it was posted is kept for the store: %s", record.id, exc)
            self.deps.tasks.spawn(self._note_when_back(record.id, posted), f"posted-{record.id}")
            return record.model_copy(update=posted)

    async def _note_when_back(self, request_id: str, posted: dict[str, Any]) -> None:
        wait = NOTE_WAIT_INITIAL
        give_up = time.monotonic() + NOTE_GIVE_UP_SECONDS
        while time.monotonic() < give_up:
            await asyncio.sleep(wait)
            try:
                await self.deps.store.update_fields(request_id, **posted)
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


def _beside_note(record: ChangeRequestRecord, others: list[OpenBeside]) -> str | None:
    """What to tell about other requests open on the same cluster, None when none is."""
    if not others:
        return None
    listed = ", ".join(f"{o.id} ({state_words(str(o.state))})" for o in others[:5])
    more = f" and {len(others) - 5} more" if len(others) > 5 else ""
    verb = "is" if len(others) == 1 else "are"
    return (
        f"Note: {listed}{more} {verb} also open on {record.cluster_name} "
        f"({record.cluster_id}). Each is re-checked against the cluster when approved: "
        f"the one approved second fails as {STALE_AT_APPROVAL} if the first changed what "
        "its preview was made from."
    )


def _run_at(schedule: Schedule | None, now: datetime) -> datetime | None:
    """When a scheduled change runs; a Refusal naming the bounds when it cannot."""
    if schedule is None:
        return None
    try:
        return schedule.resolve(now)
    except ScheduleError as exc:
        raise Refusal(str(exc), kind="schedule", field="run_at") from None


def _guard_of(stored: Mapping[str, object]) -> dict[str, Any]:
    """The guardrails' part of a new request's stored plan (``guard_json``'s shape)."""
    guard = stored.get("guard")
    return guard if isinstance(guard, dict) else {}
