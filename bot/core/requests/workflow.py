"""Change requests: preview → approval → execution → result → follow-up (SPEC §3-§5).

Every state change is a compare-and-set in the store, so two replicas, two approvers
clicking at once, or a click delivered twice execute a change once. A change that may
have reached the provider and whose outcome we did not see ends ``unknown`` — never
re-run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from bot.core.policy import Authorizer, Policy, Role
from bot.core.store.db import ChangeRequestRecord, RequestState, Store
from bot.metrics import APPROVAL_DECISIONS, APPROVALS_PENDING, CHANGE_REQUESTS
from bot.providers.base import (
    ChangeInputError,
    ChangePlan,
    ClusterState,
    ClusterSummary,
    ProviderAdapter,
)
from bot.providers.errors import ProviderError, RuleViolation
from bot.redact import redact
from bot.slack import blocks as render
from bot.slack.blocks import RequestView, SlackMessage
from bot.slack.messenger import Messenger, SlackDeliveryError

log = logging.getLogger(__name__)

Decision = Literal["approve", "deny", "cancel"]
S = RequestState


@dataclass(frozen=True)
class Reply:
    """What the person who acted should see; ``public`` posts it in the channel."""

    message: SlackMessage
    public: bool = False


@dataclass(frozen=True)
class NeedsBreakGlass:
    """The requester (an admin) pressed Approve on their own request: ask for a reason."""

    request_id: str


class Refusal(Exception):
    """A request refused before anything changed; the text is shown and audited."""

    def __init__(
        self,
        message: str,
        *,
        kind: str = "refused",
        field: str | None = None,
        mentions: tuple[str, ...] = (),
    ) -> None:
        self.message = message
        self.kind = kind
        self.field = field
        self.mentions = mentions  # Slack user ids in the text shown as real mentions
        super().__init__(message)

    def reply(self) -> Reply:
        return Reply(render.error(self.message, mentions=self.mentions))


AdapterLookup = Callable[[str], ProviderAdapter]


def view_of(record: ChangeRequestRecord) -> RequestView:
    plan = ChangePlan.model_validate(record.plan["plan"])
    return RequestView(
        id=record.id,
        state=str(record.state),
        provider=record.provider,
        project=record.project,
        cluster_id=record.cluster_id,
        cluster_name=record.cluster_name,
        action=record.action,
        preview=render.plan_lines(plan),
        requester=record.requester,
        channel=record.channel,
        needs_approval=record.needs_approval,
        reason=record.reason,
        decided_by=record.decided_by,
        decision_note=record.decision_note,
        result_message=record.result_message,
        break_glass=record.break_glass,
        expires_at=record.expires_at,
    )


class ChangeWorkflow:
    def __init__(
        self,
        *,
        policy: Policy,
        authorizer: Authorizer,
        store: Store,
        adapter_for: AdapterLookup,
        messenger: Messenger,
        instance_id: str,
        poll_seconds: float,
        followup_minutes: float = 30.0,
        exec_lease_seconds: float = 30.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.policy = policy
        self.authorizer = authorizer
        self.store = store
        self.adapter_for = adapter_for
        self.messenger = messenger
        self.instance_id = instance_id
        self.poll_seconds = poll_seconds
        self.followup_minutes = followup_minutes
        self.exec_lease_seconds = exec_lease_seconds
        self.clock = clock
        self._tasks: set[asyncio.Task[Any]] = set()
        self._executing: set[str] = set()  # request ids this process is sending now
        self._idle = asyncio.Event()  # set while nothing is being sent
        self._idle.set()

    # -- helpers ----------------------------------------------------------------------
    def spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "background task %s failed: %s", task.get_name(), redact(repr(task.exception()))
            )

    async def drain(self) -> None:
        """Wait for background work (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def audit(
        self,
        actor: str,
        event: str,
        *,
        project: str | None = None,
        cluster_id: str | None = None,
        request_id: str | None = None,
        outcome: str | None = None,
        **detail: Any,
    ) -> None:
        await self.store.append_audit(
            actor=actor,
            event=event,
            project=project,
            cluster_id=cluster_id,
            request_id=request_id,
            outcome=outcome,
            detail={k: redact(v) if isinstance(v, str) else v for k, v in detail.items()},
        )

    async def refuse(
        self,
        user: str,
        channel: str,
        refusal: Refusal,
        *,
        project: str | None = None,
        cluster_id: str | None = None,
        request_id: str | None = None,
        command: str = "",
    ) -> Reply:
        await self.audit(
            user,
            "refused",
            project=project,
            cluster_id=cluster_id,
            request_id=request_id,
            outcome=refusal.kind,
            reason=refusal.message,
            channel=channel,
            command=command,
        )
        return refusal.reply()

    async def require(
        self, user: str, project: str, channel: str, needed: Role, *, doing: str = "this"
    ) -> Role:
        decision = await self.authorizer.check(user, project, channel, needed, action=doing)
        if not decision.allowed or decision.role is None:
            raise Refusal(decision.reason, kind="not_authorized")
        return decision.role

    def require_cluster_allowed(self, project: str, cluster_id: str) -> None:
        if not self.authorizer.cluster_allowed(project, cluster_id):
            raise Refusal(
                f"cluster {cluster_id} is not in the allowlist of project {project}.",
                kind="cluster_not_allowed",
            )

    async def fetch(self, project: str, cluster_id: str) -> ClusterState:
        try:
            return await self.adapter_for(project).get_cluster(cluster_id)
        except ChangeInputError as exc:  # e.g. an E2E cluster id that is not a number
            raise Refusal(
                "; ".join(exc.errors.values()) or f"{cluster_id} is not a valid cluster id",
                kind="invalid",
                field="cluster_id",
            ) from None
        except ProviderError as exc:
            raise Refusal(
                f"could not fetch {cluster_id}: {exc.user_message}", kind=f"provider_{exc.kind}"
            ) from None

    def make_plan(
        self, project: str, state: ClusterState, action: str, inputs: Mapping[str, Any]
    ) -> ChangePlan:
        try:
            return self.adapter_for(project).plan(state, action, inputs)
        except ChangeInputError as exc:
            lines = "; ".join(f"{k}: {v}" for k, v in exc.errors.items())
            first = next(iter(exc.errors), None)
            raise Refusal(f"invalid change — {lines}", kind="invalid", field=first) from None
        except RuleViolation as exc:
            raise Refusal(exc.message, kind="rule", field=exc.field) from None

    async def _post_or_log(
        self, channel: str, message: SlackMessage, *, thread_ts: str | None = None
    ) -> str | None:
        try:
            return await self.messenger.post(channel, message, thread_ts=thread_ts)
        except SlackDeliveryError as exc:
            log.warning("could not post in %s: %s", channel, exc.code)
            return None

    async def _edit_root(self, record: ChangeRequestRecord) -> None:
        if not record.root_ts:
            return
        with contextlib.suppress(SlackDeliveryError):
            await self.messenger.update(
                record.channel, record.root_ts, render.request_root(view_of(record))
            )

    async def _left_pending(self, record: ChangeRequestRecord) -> None:
        """A request left ``pending``: count it, and replace the prompt's buttons with the
        outcome so nobody clicks a decided request."""
        APPROVALS_PENDING.dec()
        if record.prompt_ts:
            with contextlib.suppress(SlackDeliveryError):
                await self.messenger.update(
                    record.channel, record.prompt_ts, render.approval_closed(view_of(record))
                )

    async def _mirror(self, record: ChangeRequestRecord, note: str) -> None:
        project = self.policy.projects.get(record.project)
        notify = getattr(project, "notify_channel", None)
        if not notify or notify == record.channel:
            return
        message = render.request_root(view_of(record))
        message = SlackMessage(
            text=f"{render.escape(note)} — {message.text}",
            blocks=[render.context(render.escape(note)), *message.blocks],
        )
        if await self._post_or_log(notify, message) is None:
            await self.audit(
                "gpuops",
                "mirror_failed",
                project=record.project,
                request_id=record.id,
                channel=notify,
            )

    # -- request ----------------------------------------------------------------------
    async def request_change(
        self,
        *,
        user: str,
        channel: str,
        project: str,
        cluster_id: str,
        action: str,
        inputs: Mapping[str, Any],
        reason: str | None,
        command: str = "",
    ) -> Reply:
        try:
            await self.require(user, project, channel, Role.operator)
            self.require_cluster_allowed(project, cluster_id)
            state = await self.fetch(project, cluster_id)
            plan = self.make_plan(project, state, action, inputs)
        except Refusal as refusal:
            CHANGE_REQUESTS.labels(self._provider_of(project), "refused").inc()
            return await self.refuse(
                user, channel, refusal, project=project, cluster_id=cluster_id, command=command
            )
        return await self._open_request(user, channel, plan, inputs, reason)

    def _provider_of(self, project: str) -> str:
        cfg = self.policy.projects.get(project)
        return cfg.provider if cfg is not None else "unknown"

    async def _open_request(
        self,
        user: str,
        channel: str,
        plan: ChangePlan,
        inputs: Mapping[str, Any],
        reason: str | None,
    ) -> Reply:
        needs_approval = self.policy.requires_approval(plan.project, plan.kinds)
        expire = timedelta(minutes=self.policy.approvals.expire_after_minutes)
        record = await self.store.create_request(
            provider=plan.provider,
            project=plan.project,
            cluster_id=plan.cluster_id,
            cluster_name=plan.cluster_name,
            action=plan.action,
            plan={"plan": plan.model_dump(mode="json"), "inputs": dict(plan.body)},
            kinds=plan.kinds,
            needs_approval=needs_approval,
            requester=user,
            channel=channel,
            reason=reason,
            expires_at=self.clock() + expire if needs_approval else None,
            state=S.PENDING if needs_approval else S.APPROVED,
        )
        await self.audit(
            user,
            "requested",
            project=plan.project,
            cluster_id=plan.cluster_id,
            request_id=record.id,
            outcome=str(record.state),
            preview=plan.preview_text(),
            kinds=plan.kinds,
            reason=reason or "",
            channel=channel,
        )
        try:
            root_ts = await self.messenger.post(channel, render.request_root(view_of(record)))
        except SlackDeliveryError as exc:
            await self._abandon(record, f"could not post in the channel ({exc.code})")
            return Reply(
                render.error(
                    f"{exc.user_message} Nothing was changed (request {record.id} withdrawn)."
                )
            )
        record = await self.store.update_fields(record.id, root_ts=root_ts) or record
        if needs_approval:
            prompt = render.approval_prompt(
                view_of(record), expire_minutes=self.policy.approvals.expire_after_minutes
            )
            try:
                prompt_ts = await self.messenger.post(channel, prompt, thread_ts=root_ts)
            except SlackDeliveryError as exc:
                # Without the buttons nobody can approve it: withdraw it rather than let it
                # wait for an approval that cannot come.
                await self._abandon(record, f"could not post the approval prompt ({exc.code})")
                return Reply(
                    render.error(
                        f"{exc.user_message} Nothing was changed (request {record.id} withdrawn)."
                    )
                )
            record = await self.store.update_fields(record.id, prompt_ts=prompt_ts) or record
            APPROVALS_PENDING.inc()
            await self._mirror(record, "Change requested")
            return Reply(
                render.notice(
                    f"Request {record.id} is waiting for approval in the thread: "
                    f"{plan.preview_text()}"
                )
            )
        await self._mirror(record, "Change requested (no approval needed)")
        await self.execute(record.id, actor=user)
        # Say how it went here too: the thread may be out of the bot's reach by now.
        final = await self.store.get_request(record.id) or record
        outcome = render.STATE_WORDS.get(str(final.state), str(final.state))
        if final.result_message:
            outcome += f": {final.result_message}"
        return Reply(
            render.notice(f"Request {record.id} ran — see the thread for the result ({outcome}).")
        )

    async def _abandon(self, record: ChangeRequestRecord, why: str) -> None:
        done = await self.store.transition(
            record.id,
            from_states={S.PENDING, S.APPROVED},
            to=S.CANCELLED,
            decided_by="gpuops",
            decision_note=why,
            result_message=why,
        )
        if done is not None:
            CHANGE_REQUESTS.labels(record.provider, "cancelled").inc()
            await self.audit(
                "gpuops",
                "withdrawn",
                project=record.project,
                cluster_id=record.cluster_id,
                request_id=record.id,
                outcome="cancelled",
                reason=why,
            )
            await self._edit_root(done)

    # -- decisions --------------------------------------------------------------------
    async def decide(
        self,
        *,
        user: str,
        channel: str,
        request_id: str,
        decision: Decision,
        break_glass_reason: str | None = None,
    ) -> Reply | NeedsBreakGlass | None:
        record = await self.store.get_request(request_id)
        if record is None:
            return await self.refuse(
                user,
                channel,
                Refusal(f"there is no change request {request_id}.", kind="unknown_request"),
            )
        if record.state is S.PENDING and record.expires_at and record.expires_at <= self.clock():
            # Past its deadline but not yet swept: it expires now, not gets decided.
            await self.expire_due()
            record = await self.store.get_request(record.id) or record
        if record.state is not S.PENDING:
            return await self.refuse(
                user,
                channel,
                self._already(record),
                project=record.project,
                request_id=record.id,
            )
        try:
            if decision == "cancel":
                await self._may_cancel(user, channel, record)
                return await self._close(record, user, S.CANCELLED, "cancelled", None)
            bg = await self._may_decide(user, channel, record, decision, break_glass_reason)
        except Refusal as refusal:
            APPROVAL_DECISIONS.labels("refused").inc()
            return await self.refuse(
                user,
                channel,
                refusal,
                project=record.project,
                cluster_id=record.cluster_id,
                request_id=record.id,
            )
        except _AskBreakGlass:
            return NeedsBreakGlass(record.id)
        if decision == "deny":
            return await self._close(record, user, S.DENIED, "denied", None)
        return await self._approve(record, user, channel, bg, break_glass_reason)

    def _already(self, record: ChangeRequestRecord) -> Refusal:
        words = render.STATE_WORDS.get(str(record.state), str(record.state))
        who = record.decided_by or ""
        if (
            record.state in (S.APPROVED, S.EXECUTING, S.SUCCEEDED, S.FAILED, S.UNKNOWN)
            and record.needs_approval
            and who
        ):
            text = f"{record.id} was already approved by <@{who}> ({words})."
        elif who and record.state in (S.DENIED, S.CANCELLED):
            text = f"{record.id} was already {words} by <@{who}>."
        else:
            text = f"{record.id} is already {words}."
        return Refusal(text, kind="already_decided", mentions=(who,) if who else ())

    async def _may_cancel(self, user: str, channel: str, record: ChangeRequestRecord) -> None:
        if user == record.requester:
            return
        decision = await self.authorizer.check(user, record.project, channel, Role.admin)
        if not decision.allowed:
            raise Refusal(
                f"only the requester (<@{record.requester}>) or an admin of {record.project} "
                f"can cancel {record.id}.",
                kind="not_authorized",
                mentions=(record.requester,),
            )

    async def _may_decide(
        self,
        user: str,
        channel: str,
        record: ChangeRequestRecord,
        decision: Decision,
        break_glass_reason: str | None,
    ) -> bool:
        """Check the decider; True when this is a break-glass self-approval."""
        role = await self.require(
            user, record.project, channel, Role.approver, doing=f"{decision} requests"
        )
        if user != record.requester:
            return False
        if decision == "approve" and self.policy.approvals.break_glass and role >= Role.admin:
            if break_glass_reason and break_glass_reason.strip():
                return True
            raise _AskBreakGlass()
        raise Refusal(
            f"you requested {record.id}; another approver of {record.project} must {decision} it.",
            kind="self_approval",
        )

    async def _close(
        self,
        record: ChangeRequestRecord,
        user: str,
        to: RequestState,
        event: str,
        note: str | None,
    ) -> Reply | None:
        closed = await self.store.transition(
            record.id, from_states={S.PENDING}, to=to, decided_by=user, decision_note=note
        )
        if closed is None:
            fresh = await self.store.get_request(record.id) or record
            return self._already(fresh).reply()
        await self._left_pending(closed)
        APPROVAL_DECISIONS.labels(event).inc()
        CHANGE_REQUESTS.labels(record.provider, event).inc()
        await self.audit(
            user,
            event,
            project=record.project,
            cluster_id=record.cluster_id,
            request_id=record.id,
            outcome=event,
        )
        await self._edit_root(closed)
        await self._post_or_log(
            closed.channel,
            render.decision_note(_DECISION_ICONS.get(event, ""), event.capitalize(), user, note),
            thread_ts=closed.root_ts,
        )
        await self._mirror(closed, f"Change {event}")
        return None

    async def _approve(
        self,
        record: ChangeRequestRecord,
        user: str,
        channel: str,
        break_glass: bool,
        reason: str | None,
    ) -> Reply | None:
        try:
            await self.require(record.requester, record.project, record.channel, Role.operator)
        except Refusal as refusal:
            return await self._fail_pending(
                record,
                user,
                f"the requester no longer may request this change: {refusal.message}",
                "requester_revoked",
            )
        try:
            state = await self.fetch(record.project, record.cluster_id)
        except Refusal as refusal:  # the provider did not answer: not a stale preview
            why = (
                f"the cluster could not be re-checked before running the change — "
                f"{refusal.message}. Nothing was changed; request it again."
            )
            return await self._fail_pending(record, user, why, refusal.kind)
        try:
            fresh = self.make_plan(record.project, state, record.action, record.plan["inputs"])
        except Refusal as refusal:
            return await self._fail_pending(
                record, user, f"stale: the change no longer applies — {refusal.message}", "stale"
            )
        old = ChangePlan.model_validate(record.plan["plan"])
        if fresh.fingerprint != old.fingerprint or fresh.body != old.body:
            return await self._fail_pending(record, user, self._stale_text(old, fresh), "stale")
        approved = await self.store.transition(
            record.id,
            from_states={S.PENDING},
            to=S.APPROVED,
            decided_by=user,
            decision_note=reason,
            break_glass=break_glass,
        )
        if approved is None:
            current = await self.store.get_request(record.id) or record
            APPROVAL_DECISIONS.labels("refused").inc()
            return self._already(current).reply()
        await self._left_pending(approved)
        APPROVAL_DECISIONS.labels("approved").inc()
        await self.audit(
            user,
            "approved",
            project=record.project,
            cluster_id=record.cluster_id,
            request_id=record.id,
            outcome="approved",
            break_glass=break_glass,
            reason=reason or "",
        )
        await self._edit_root(approved)
        if break_glass:
            note = f"Break glass: {user} approved their own request. Reason: {reason}"
            await self._post_or_log(
                approved.channel,
                render.thread_note(note, icon=":rotating_light:"),
                thread_ts=approved.root_ts,
            )
            await self._mirror(approved, note)
        else:
            await self._post_or_log(
                approved.channel,
                render.decision_note(":white_check_mark:", "Approved", user),
                thread_ts=approved.root_ts,
            )
        await self.execute(record.id, actor=user)
        return None

    @staticmethod
    def _stale_text(old: ChangePlan, fresh: ChangePlan) -> str:
        changed = [
            f"{key} was {old.fingerprint.get(key)!s}, now {fresh.fingerprint.get(key)!s}"
            for key in sorted(set(old.fingerprint) | set(fresh.fingerprint))
            if old.fingerprint.get(key) != fresh.fingerprint.get(key)
        ]
        detail = "; ".join(changed) or "the change it would make differs"
        return f"stale: the cluster changed since the preview ({detail}). Request it again."

    async def _fail_pending(
        self, record: ChangeRequestRecord, user: str, why: str, kind: str
    ) -> Reply | None:
        closed = await self.store.transition(
            record.id,
            from_states={S.PENDING},
            to=S.FAILED,
            decided_by=user,
            decision_note=kind,
            result_message=why,
        )
        if closed is None:
            current = await self.store.get_request(record.id) or record
            return self._already(current).reply()
        await self._left_pending(closed)
        APPROVAL_DECISIONS.labels("refused").inc()
        CHANGE_REQUESTS.labels(record.provider, "failed").inc()
        await self.audit(
            user,
            "refused",
            project=record.project,
            cluster_id=record.cluster_id,
            request_id=record.id,
            outcome=kind,
            reason=why,
        )
        await self._edit_root(closed)
        await self._post_or_log(
            closed.channel, render.thread_note(why, icon=":x:"), thread_ts=closed.root_ts
        )
        return Reply(render.error(f"{record.id} was not approved: {why}"))

    # -- execution --------------------------------------------------------------------
    async def execute(self, request_id: str, *, actor: str) -> None:
        record = await self.store.get_request(request_id)
        if record is None or record.state is not S.APPROVED:
            return
        if not await self._lock_cluster(record):
            return
        # Hold the execution lease before the request shows as executing: a replica's
        # recover_interrupted must never find it executing without a live holder.
        lease = f"exec:{record.id}"
        self._executing.add(record.id)
        self._idle.clear()
        running = None
        if await self.store.acquire_lease(lease, self.instance_id, self.exec_lease_seconds):
            running = await self.store.transition(
                request_id, from_states={S.APPROVED}, to=S.EXECUTING
            )
        if running is None:
            self._done_executing(record.id)
            await self.store.release_lease(lease, self.instance_id)
            current = await self.store.get_request(request_id)
            if current is not None and current.state in TERMINAL:
                await self.store.unlock_cluster(
                    record.provider, record.project, record.cluster_id, record.id
                )
            return
        heartbeat = self.spawn(self._heartbeat(lease), f"heartbeat-{record.id}")
        try:
            await self.audit(
                actor,
                "executing",
                project=record.project,
                cluster_id=record.cluster_id,
                request_id=record.id,
            )
            await self._edit_root(running)
            await self._run(running)
        finally:
            heartbeat.cancel()
            self._done_executing(record.id)
            await self.store.unlock_cluster(
                record.provider, record.project, record.cluster_id, record.id
            )
            await self.store.release_lease(lease, self.instance_id)

    async def _heartbeat(self, lease: str) -> None:
        while True:
            await asyncio.sleep(self.exec_lease_seconds / 3)
            await self.store.acquire_lease(lease, self.instance_id, self.exec_lease_seconds)

    async def _lock_cluster(self, record: ChangeRequestRecord) -> bool:
        args = (record.provider, record.project, record.cluster_id)
        for _ in range(2):
            if await self.store.lock_cluster(*args, record.id):
                return True
            holder_id = await self.store.cluster_holder(*args)
            holder = await self.store.get_request(holder_id) if holder_id else None
            if holder is None or holder.state in TERMINAL:
                if holder_id:
                    await self.store.unlock_cluster(*args, holder_id)
                continue
            why = (
                f"another change ({holder.id}) is running on {record.cluster_id}; "
                "request again when it has finished."
            )
            failed = await self.store.transition(
                record.id, from_states={S.APPROVED}, to=S.FAILED, result_message=why
            )
            if failed is not None:
                CHANGE_REQUESTS.labels(record.provider, "failed").inc()
                await self.audit(
                    "gpuops",
                    "refused",
                    project=record.project,
                    cluster_id=record.cluster_id,
                    request_id=record.id,
                    outcome="cluster_busy",
                    reason=why,
                )
                await self._edit_root(failed)
                await self._post_or_log(
                    failed.channel, render.thread_note(why, icon=":x:"), thread_ts=failed.root_ts
                )
            return False
        return False

    async def _run(self, record: ChangeRequestRecord) -> None:
        plan = ChangePlan.model_validate(record.plan["plan"])
        adapter = self.adapter_for(record.project)
        try:
            outcome = await adapter.apply(plan)
        except ProviderError as exc:
            to = S.UNKNOWN if exc.may_have_applied else S.FAILED
            if exc.may_have_applied:
                text = (
                    f"{exc.user_message}. The provider may have applied the change: "
                    "check the cluster before requesting it again. It will not be re-run."
                )
            else:
                text = f"{exc.user_message}. Nothing was changed."
            await self._finish(record, to, text, kind=exc.kind)
            return
        except Exception as exc:  # an unexpected bug must not leave the request hanging
            log.exception("change %s crashed during execution", record.id)
            text = (
                f"gpuops hit an internal error while sending the change "
                f"({type(exc).__name__}); the provider may have applied it: check the "
                "cluster before requesting it again."
            )
            await self._finish(record, S.UNKNOWN, text, kind="internal")
            return
        await self._finish(record, S.SUCCEEDED, outcome.message, summary=outcome.summary)

    async def _finish(
        self,
        record: ChangeRequestRecord,
        to: RequestState,
        message: str,
        *,
        kind: str = "ok",
        summary: ClusterSummary | None = None,
    ) -> None:
        done = await self.store.transition(
            record.id, from_states={S.EXECUTING}, to=to, result_message=redact(message)
        )
        if done is None:
            return
        CHANGE_REQUESTS.labels(record.provider, str(to)).inc()
        await self.audit(
            record.requester,
            "result",
            project=record.project,
            cluster_id=record.cluster_id,
            request_id=record.id,
            outcome=str(to),
            message=message,
            kind=kind,
        )
        await self._edit_root(done)
        icon = {S.SUCCEEDED: ":large_green_circle:", S.FAILED: ":red_circle:"}.get(to, ":warning:")
        await self._post_or_log(
            done.channel, render.thread_note(message, icon=icon), thread_ts=done.root_ts
        )
        if summary is None and to is S.UNKNOWN:
            with contextlib.suppress(ProviderError):
                summary = (
                    await self.adapter_for(record.project).get_cluster(record.cluster_id)
                ).summary
        if summary is not None:
            summary_ts = await self._post_or_log(
                done.channel, self._summary_message(done, summary), thread_ts=done.root_ts
            )
            if summary_ts:
                done = await self.store.update_fields(done.id, summary_ts=summary_ts) or done
            if to is S.SUCCEEDED and self.poll_seconds > 0 and not summary.steady:
                self.spawn(self.follow_up(done.id), f"follow-up-{done.id}")
        await self._mirror(done, f"Change {render.STATE_WORDS.get(str(to), str(to))}")

    def _summary_message(
        self, record: ChangeRequestRecord, summary: ClusterSummary, note: str | None = None
    ) -> SlackMessage:
        return render.cluster_summary(
            summary,
            requested_by=record.requester,
            approved_by=record.decided_by if record.needs_approval else None,
            request_id=record.id,
            note=note,
        )

    # -- follow-up --------------------------------------------------------------------
    async def follow_up(self, request_id: str) -> None:
        lease = f"poll:{request_id}"
        ttl = max(self.poll_seconds * 3, 10.0)
        if not await self.store.acquire_lease(lease, self.instance_id, ttl):
            return
        try:
            await self._poll_until_steady(request_id, lease, ttl)
        finally:
            await self.store.release_lease(lease, self.instance_id)

    async def _poll_until_steady(self, request_id: str, lease: str, ttl: float) -> None:
        record = await self.store.get_request(request_id)
        if record is None:
            return
        adapter = self.adapter_for(record.project)
        deadline = self.clock() + timedelta(minutes=self.followup_minutes)
        last_status: str | None = None
        failures = 0
        while self.clock() < deadline:
            await asyncio.sleep(self.poll_seconds)
            await self.store.acquire_lease(lease, self.instance_id, ttl)
            try:
                summary = (await adapter.get_cluster(record.cluster_id)).summary
            except ProviderError as exc:
                failures += 1
                if failures >= 5:
                    await self._post_or_log(
                        record.channel,
                        render.thread_note(
                            f"Stopped following {record.cluster_id}: {exc.user_message}",
                            icon=":warning:",
                        ),
                        thread_ts=record.root_ts,
                    )
                    return
                continue
            failures = 0
            if summary.status != last_status:
                last_status = summary.status
                await self._show_status(record, summary)
            if summary.steady:
                await self._post_or_log(
                    record.channel,
                    render.thread_note(
                        f"{summary.name} is {summary.status}.", icon=":large_green_circle:"
                    ),
                    thread_ts=record.root_ts,
                )
                return
        await self._post_or_log(
            record.channel,
            render.thread_note(
                f"{record.cluster_id} is still {last_status} after {self.followup_minutes:g} "
                "minutes; stopped following.",
                icon=":warning:",
            ),
            thread_ts=record.root_ts,
        )

    async def _show_status(self, record: ChangeRequestRecord, summary: ClusterSummary) -> None:
        fresh = await self.store.get_request(record.id) or record
        note = f"status as of {self.clock():%H:%M:%S} UTC"
        message = self._summary_message(fresh, summary, note)
        if fresh.summary_ts:
            try:
                await self.messenger.update(fresh.channel, fresh.summary_ts, message)
                return
            except SlackDeliveryError:
                pass  # the summary is gone or not editable: post the status as a new reply
        await self._post_or_log(fresh.channel, message, thread_ts=fresh.root_ts)

    # -- housekeeping -----------------------------------------------------------------
    async def expire_due(self) -> int:
        expired = 0
        due = await self.store.list_requests(states={S.PENDING}, expires_before=self.clock())
        for record in due:
            done = await self.store.transition(record.id, from_states={S.PENDING}, to=S.EXPIRED)
            if done is None:
                continue
            expired += 1
            await self._left_pending(done)
            APPROVAL_DECISIONS.labels("expired").inc()
            CHANGE_REQUESTS.labels(record.provider, "expired").inc()
            minutes = self.policy.approvals.expire_after_minutes
            await self.audit(
                "gpuops",
                "expired",
                project=record.project,
                cluster_id=record.cluster_id,
                request_id=record.id,
                outcome="expired",
            )
            await self._edit_root(done)
            await self._post_or_log(
                done.channel,
                render.thread_note(
                    f"Expired: nobody approved {record.id} within {minutes} minutes. "
                    "Nothing was changed.",
                    icon=":alarm_clock:",
                ),
                thread_ts=done.root_ts,
            )
            await self._mirror(done, "Change request expired")
        return expired

    async def recover_interrupted(self) -> int:
        """Mark ``executing`` requests whose executor is gone as ``unknown`` (never re-run),
        and fail ``approved`` ones whose bot died before sending them."""
        recovered = await self._fail_orphaned_approvals()
        for record in await self.store.list_requests(states={S.EXECUTING}):
            if record.id not in self._executing and await self._close_abandoned(
                record, S.EXECUTING, S.UNKNOWN, _RESTARTED_WHILE_SENDING
            ):
                recovered += 1
        return recovered

    async def _fail_orphaned_approvals(self) -> int:
        """An ``approved`` request that no replica went on to send (its bot died between
        the approval and the provider call) was never sent: fail it and free its cluster,
        which it may hold. Only when older than a lease period and its lease is free."""
        before = self.clock() - timedelta(seconds=self.exec_lease_seconds)
        closed = 0
        for record in await self.store.list_requests(states={S.APPROVED}):
            if record.id in self._executing or record.updated_at > before:
                continue
            if await self._close_abandoned(record, S.APPROVED, S.FAILED, _RESTARTED_BEFORE_SENDING):
                closed += 1
        return closed

    async def _close_abandoned(
        self, record: ChangeRequestRecord, state: RequestState, to: RequestState, why: str
    ) -> bool:
        """End a request whose executor is gone (its lease is free), free its cluster and
        say so in its thread. False when a live replica holds it or it moved meanwhile."""
        lease = f"exec:{record.id}"
        if not await self.store.acquire_lease(lease, self.instance_id, self.exec_lease_seconds):
            return False  # a live replica is sending it, or about to
        done = await self.store.transition(
            record.id, from_states={state}, to=to, result_message=why
        )
        await self.store.release_lease(lease, self.instance_id)
        if done is None:
            return False
        CHANGE_REQUESTS.labels(record.provider, str(to)).inc()
        await self.store.unlock_cluster(
            record.provider, record.project, record.cluster_id, record.id
        )
        await self.audit(
            "gpuops",
            "result",
            project=record.project,
            cluster_id=record.cluster_id,
            request_id=record.id,
            outcome=str(to),
            reason=why,
        )
        await self._edit_root(done)
        await self._post_or_log(
            done.channel, render.thread_note(why, icon=":warning:"), thread_ts=done.root_ts
        )
        return True

    async def refresh_pending_gauge(self) -> None:
        pending = await self.store.list_requests(states={S.PENDING}, limit=10_000)
        APPROVALS_PENDING.set(len(pending))

    async def sweep_once(self) -> None:
        await self.expire_due()
        await self.recover_interrupted()
        await self.refresh_pending_gauge()
        # Slack redelivers within minutes; a day of delivery keys is plenty.
        await self.store.prune_deliveries(self.clock() - DELIVERY_MEMORY)

    async def sweep_forever(self, every: float) -> None:
        while True:
            try:
                await self.sweep_once()
            except Exception:
                log.exception("sweeper round failed")
            await asyncio.sleep(every)

    def _done_executing(self, request_id: str) -> None:
        self._executing.discard(request_id)
        if not self._executing:
            self._idle.set()

    async def wait_for_executions(self, grace: float) -> set[str]:
        """Let changes this process is sending finish (on shutdown); the ids still running."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self._idle.wait()
        return set(self._executing)


DELIVERY_MEMORY = timedelta(days=1)
_RESTARTED_WHILE_SENDING = (
    "gpuops restarted while this change was being sent; its outcome is unknown. Check the "
    "cluster before requesting it again — it will not be re-run."
)
_RESTARTED_BEFORE_SENDING = (
    "gpuops restarted after this change was approved and before sending it; nothing was "
    "sent. Request it again if it is still needed."
)
_DECISION_ICONS = {"denied": ":no_entry_sign:", "cancelled": ":heavy_multiplication_x:"}


class _AskBreakGlass(Exception):
    """An admin approving their own request must first give a break-glass reason."""


TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.UNKNOWN, S.DENIED, S.EXPIRED, S.CANCELLED})
