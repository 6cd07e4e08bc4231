"""Together node remediations in the notify channel (SPEC §7.1): post each one newly
awaiting approval once, follow it until it ends, and let one approver's click decide it.

A decision is sent at most once: the click that moves the stored record from ``awaiting``
to ``deciding`` (compare-and-set) is the only one that calls Together; approve and reject
are never retried once they may have been processed."""

from __future__ import annotations

import asyncio
import bisect
import functools
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

from bot.core.access import Access, Refusal
from bot.core.answers import Notice, Reply, error, notice, store_unavailable
from bot.core.notifier import NotDelivered
from bot.core.policy import Role
from bot.core.store import StoreUnavailable
from bot.core.store.watch import (
    NewRemediationRecord,
    RemediationDecision,
    RemediationRecord,
    WatchStore,
)
from bot.core.watch.backlog import StoreBacklog
from bot.core.watch.keys import remediation_key
from bot.core.watch.notifier import DecisionOutcome, WatchNotifier
from bot.metrics import REMEDIATION_DECISIONS, WATCH_ALERTS
from bot.providers.base import ClusterSummary, RemediationDecisions
from bot.providers.errors import (
    AlreadyDecided,
    ProviderError,
    ProviderNotFound,
    ProviderRateLimited,
)
from bot.providers.remediations import FINAL_STATES, Remediation, RemediationRef, RemediationState

log = logging.getLogger(__name__)

_T = TypeVar("_T")

Verb = Literal["approve", "reject"]
RemediationsFor = Callable[[str], RemediationDecisions]

_DONE: dict[Verb, tuple[RemediationDecision, DecisionOutcome, str]] = {
    "approve": (RemediationDecision.APPROVED, "approved", "Approved"),
    "reject": (RemediationDecision.REJECTED, "rejected", "Rejected"),
}
_DOING: dict[Verb, str] = {"approve": "approving", "reject": "rejecting"}
GONE_STATE = "GONE"  # stored for a remediation Together no longer has (never followed again)
_FINISHED = [*(state.value for state in FINAL_STATES), GONE_STATE]
# Clusters whose remediations are listed at the same time: a project of 50 clusters at 1 s
# per call is polled in about 7 s, not 50, without a burst of 50 calls.
LISTINGS_AT_ONCE = 8
# Clusters whose remediations one poll lists at most: a larger project is covered in turns
# (the next poll goes on where this one stopped), so a round's provider calls and time stay
# bounded however many clusters it has; each cluster is listed every ceil(N / 200) polls.
LISTINGS_PER_POLL = 200
# A decision still being sent after this long was cut off (its replica died mid-call).
STALE_DECISION = timedelta(minutes=5)
_KEPT = "gpuops lost contact with its database meanwhile; the decision is recorded once it is back."
_UNKNOWN = error("I do not know that remediation (was it posted by another gpuops?).")


class RemediationDesk:
    """Posting, following and deciding the remediations of watched Together projects."""

    def __init__(
        self,
        *,
        access: Access,
        store: WatchStore,
        notifier: WatchNotifier,
        remediations_for: RemediationsFor,
    ) -> None:
        self.access = access
        self.store = store
        self.notifier = notifier
        self.remediations_for = remediations_for
        self.backlog = StoreBacklog()
        self.listings_per_poll = LISTINGS_PER_POLL
        self._next_cluster: dict[str, str] = {}  # per project: where the next poll goes on

    # ---- polling -----------------------------------------------------------------------

    async def poll(self, project: str, channel: str, clusters: list[ClusterSummary]) -> None:
        """Follow what was posted before, then post what newly awaits approval on the
        project's clusters. Provider errors propagate (the watcher backs off)."""
        await self.backlog.flush()
        client = self.remediations_for(project)
        for record in await self.store.followed_remediations(project, _FINISHED):
            await self._follow_one(client, record)
        names = {
            cluster.cluster_id: cluster.name
            for cluster in clusters
            if self.access.authorizer.cluster_allowed(project, cluster.cluster_id)
        }
        ids = self._turn(project, sorted(names))
        lists = await _bounded_gather(
            [
                client.list_remediations(cid, states=[RemediationState.PENDING_APPROVAL])
                for cid in ids
            ],
            LISTINGS_AT_ONCE,
        )
        for cluster_id, pending in zip(ids, lists, strict=True):
            for remediation in pending:
                await self._post_new(project, channel, names[cluster_id], remediation)

    def _turn(self, project: str, ids: list[str]) -> list[str]:
        """This poll's share of the clusters: all of them up to ``listings_per_poll``,
        else the next ``listings_per_poll`` after where the last poll stopped (wrapping)."""
        limit = self.listings_per_poll
        if len(ids) <= limit:
            self._next_cluster.pop(project, None)
            return ids
        start = bisect.bisect_left(ids, self._next_cluster.get(project, ""))
        turn = (ids[start:] + ids[:start])[:limit]
        self._next_cluster[project] = ids[(start + limit) % len(ids)]
        return turn

    async def _post_new(
        self, project: str, channel: str, cluster_name: str, remediation: Remediation
    ) -> None:
        key = remediation_key(project, remediation.id)
        claimed = await self.store.claim_remediation(
            key,
            NewRemediationRecord(
                project=project,
                cluster_id=remediation.cluster_id,
                cluster_name=cluster_name,
                instance_id=remediation.instance_id,
                remediation_id=remediation.id,
                node=remediation.node,
                channel=channel,
                provider_state=remediation.state,
            ),
        )
        if claimed is None:
            return
        claim, record = claimed
        try:
            ts = await self.notifier.remediation_pending(record, remediation)
        except NotDelivered as exc:
            log.warning("could not post remediation %s: %s", remediation.id, exc.reason)
            give_up = functools.partial(self.store.give_up_remediation, claim, record.id)
            await self.backlog.attempt(f"giving back remediation {remediation.id}", give_up)
            return
        posted = functools.partial(self.store.remediation_posted, claim, record.id, ts)
        await self.backlog.attempt(f"recording where remediation {remediation.id} is", posted)
        WATCH_ALERTS.labels("remediation").inc()
        audit = functools.partial(
            self.access.audit,
            "gpuops",
            "remediation_posted",
            project=project,
            cluster_id=remediation.cluster_id,
            outcome="posted",
            remediation=remediation.id,
            node=remediation.node,
            record=record.id,
        )
        await self.backlog.attempt(f"auditing remediation {remediation.id}", audit)

    async def _follow_one(self, client: RemediationDecisions, record: RemediationRecord) -> None:
        """Follow one; a remediation gone at Together is closed, and one whose follow-up
        failed waits for the next poll: neither stops the rest of the poll (a 429 does:
        the whole project backs off)."""
        try:
            await self._follow(client, record)
        except ProviderNotFound:
            await self._gone(record)
        except ProviderRateLimited:
            raise
        except ProviderError as exc:
            log.warning("could not follow remediation %s: %s", record.remediation_id, exc)

    async def _gone(self, record: RemediationRecord) -> None:
        closing = {
            RemediationDecision.AWAITING,
            RemediationDecision.DECIDING,
            RemediationDecision.UNKNOWN,
        }
        had_buttons = record.decision is RemediationDecision.AWAITING
        if record.decision in closing:
            updated = await self.store.decide_remediation(
                record.id,
                from_decisions={record.decision},
                to=RemediationDecision.ELSEWHERE,
                provider_state=GONE_STATE,
            )
        else:
            updated = await self.store.set_remediation(record.id, provider_state=GONE_STATE)
        if updated is None:
            return
        log.info("remediation %s is gone at Together: closed", record.remediation_id)
        await self.notifier.remediation_gone(updated, had_buttons)
        await self._audit_seen(record, "remediation_gone", "gone")

    async def _follow(self, client: RemediationDecisions, record: RemediationRecord) -> None:
        remediation = await client.get(record.cluster_id, record.instance_id, record.remediation_id)
        if remediation.awaiting_approval and _answer_lost(record):
            await self._reopen(record, remediation)
            return
        if not remediation.awaiting_approval and _answer_lost(record):
            record = await self._taken_unseen(record, remediation) or record
        if remediation.state == record.provider_state:
            return
        updated = await self.store.set_remediation(record.id, provider_state=remediation.state)
        if updated is None:
            return
        if record.provider_state == RemediationState.PENDING_APPROVAL:
            moved = await self.store.decide_remediation(
                record.id,
                from_decisions={RemediationDecision.AWAITING},
                to=RemediationDecision.ELSEWHERE,
            )
            if moved is not None:
                REMEDIATION_DECISIONS.labels("elsewhere").inc()
                await self.notifier.remediation_left_elsewhere(moved, remediation)
                await self._audit_seen(
                    record,
                    "remediation_decided_elsewhere",
                    remediation.state,
                    reviewed_by=remediation.reviewed_by or "",
                )
                updated = moved
        if remediation.state != RemediationState.PENDING_APPROVAL:
            await self.notifier.remediation_progress(updated, remediation)

    async def _taken_unseen(
        self, record: RemediationRecord, remediation: Remediation
    ) -> RemediationRecord | None:
        """A decision whose answer was lost (or whose sender died), and Together no longer
        awaits one: it was decided, by that call or another. Said so, buttons removed."""
        text = (
            f"Together no longer awaits a decision (it is {remediation.state} now). A "
            "decision started here was cut off before its answer was recorded, so which "
            "decision Together took is not known here."
        )
        settled = await self.store.decide_remediation(
            record.id,
            from_decisions={record.decision},
            to=RemediationDecision.ALREADY_DECIDED,
            decided_by=None,  # not known: "already decided at Together" says it all
        )
        if settled is None:
            return None
        REMEDIATION_DECISIONS.labels("already_decided").inc()
        await self.notifier.remediation_decided(settled, "already_decided", text)
        await self._audit_seen(record, "remediation_decided_unseen", remediation.state)
        return settled

    async def _reopen(self, record: RemediationRecord, remediation: Remediation) -> None:
        """A decision whose answer was lost (or whose sender died), and a poll since shows
        Together never took it (still awaiting approval): the buttons come back. A second
        decision cannot act twice: Together refuses one on a remediation no longer pending."""
        reopened = await self.store.decide_remediation(
            record.id,
            from_decisions={record.decision},
            to=RemediationDecision.AWAITING,
            decided_by=None,
            comment=None,
        )
        if reopened is None:
            return
        await self.notifier.remediation_reopened(reopened, remediation)
        await self._audit_seen(record, "remediation_reopened", "awaiting")

    async def _audit_seen(
        self, record: RemediationRecord, event: str, outcome: str, **detail: str
    ) -> None:
        """Audit what gpuops itself saw happen to a posted remediation."""
        await self.access.audit(
            "gpuops",
            event,
            project=record.project,
            cluster_id=record.cluster_id,
            outcome=outcome,
            remediation=record.remediation_id,
            **detail,
        )

    # ---- deciding ----------------------------------------------------------------------

    async def may_decide(
        self, *, user: str, channel: str, record_id: str, verb: Verb
    ) -> Reply | None:
        """None if ``user`` may decide it here (and it still awaits a decision); else the
        refusal (audited) to show them — before a reject form is opened for nothing."""
        try:
            record = await self._decidable(user, channel, record_id, verb)
            if isinstance(record, Reply):
                return record
            if record.decision is not RemediationDecision.AWAITING:
                return await self._lost(user, record, verb)
        except StoreUnavailable as exc:
            log.warning("refused a remediation %s: %s", verb, exc)
            return store_unavailable()
        return None

    async def decide(
        self, *, user: str, channel: str, record_id: str, verb: Verb, comment: str | None = None
    ) -> Reply:
        """One click on approve or reject; the answer is for the person who clicked. With
        the store unavailable before the click won, nothing is sent (and it says so)."""
        try:
            won = await self._win(user, channel, record_id, verb, comment)
        except StoreUnavailable as exc:
            log.warning("refused a remediation %s: %s", verb, exc)
            return store_unavailable()
        if isinstance(won, Reply):
            return won
        await self._audit_click(user, won, verb, "sending")
        return await self._send(user, won, verb, comment)

    async def _win(
        self, user: str, channel: str, record_id: str, verb: Verb, comment: str | None
    ) -> RemediationRecord | Reply:
        """The record if this click won the decision (compare-and-set), else the answer."""
        record = await self._decidable(user, channel, record_id, verb)
        if isinstance(record, Reply):
            return record
        won = await self.store.decide_remediation(
            record.id,
            from_decisions={RemediationDecision.AWAITING},
            to=RemediationDecision.DECIDING,
            decided_by=user,
            comment=comment,
        )
        if won is None:
            return await self._lost(user, record, verb)
        return won

    async def _decidable(
        self, user: str, channel: str, record_id: str, verb: Verb
    ) -> RemediationRecord | Reply:
        """The record if it exists and ``user`` may decide it; else the answer."""
        record = await self.store.get_remediation(record_id)
        if record is None:
            return _UNKNOWN
        refusal = await self._refusal(user, channel, record, verb)
        return record if refusal is None else refusal

    async def _refusal(
        self, user: str, channel: str, record: RemediationRecord, verb: Verb
    ) -> Reply | None:
        """Checked in the channel the remediation was posted to, never the payload's
        (``channel``, where the click came from, is audited)."""
        try:
            await self.access.require(
                user,
                record.project,
                record.channel,
                Role.approver,
                doing=f"{_DOING[verb]} a remediation",
            )
        except Refusal as refusal:
            REMEDIATION_DECISIONS.labels("refused").inc()
            return await self.access.refuse(
                user,
                channel,
                refusal,
                project=record.project,
                cluster_id=record.cluster_id,
                command=f"{verb}_remediation {record.remediation_id}",
            )
        return None

    async def _lost(self, user: str, record: RemediationRecord, verb: Verb) -> Reply:
        latest = await self.store.get_remediation(record.id) or record
        await self._audit_click(user, latest, verb, "too_late")
        by = f" by <@{latest.decided_by}>" if latest.decided_by else ""
        text = f"This remediation is no longer awaiting a decision ({latest.decision}{by})."
        mentions = (latest.decided_by,) if latest.decided_by else ()
        return Reply(Notice(text, mentions=mentions))

    async def _send(
        self, user: str, record: RemediationRecord, verb: Verb, comment: str | None
    ) -> Reply:
        client = self.remediations_for(record.project)
        ref = RemediationRef(record.remediation_id, record.cluster_id, record.instance_id)
        try:
            if verb == "approve":
                result = await client.approve(ref, comment=comment)
            else:
                result = await client.reject(ref, comment=comment)
        except AlreadyDecided:
            ending = _Ending(
                RemediationDecision.ALREADY_DECIDED,
                "already_decided",
                "Already decided at Together: someone decided it first.",
            )
        except ProviderError as exc:
            ending = _failure(exc)
        else:
            decision, outcome, done = _DONE[verb]
            ending = _Ending(
                decision, outcome, f"{done}; Together says {result.state}.", result.state, result
            )
        if ending.remediation is None and ending.decision is not RemediationDecision.AWAITING:
            ending = replace(ending, remediation=await self._read_quietly(client, ref))
        return await self._finish(user, record, verb, ending)

    @staticmethod
    async def _read_quietly(
        client: RemediationDecisions, ref: RemediationRef
    ) -> Remediation | None:
        """The remediation as Together has it now, for its message to keep saying why; None
        when Together does not answer (the message then shows the outcome alone)."""
        try:
            return await client.get(ref.cluster_id, ref.instance_id, ref.id)
        except ProviderError:
            return None

    async def _finish(
        self, user: str, record: RemediationRecord, verb: Verb, ending: _Ending
    ) -> Reply:
        fields: dict[str, str | None] = {}
        if ending.provider_state is not None:
            fields["provider_state"] = ending.provider_state
        if ending.decision is RemediationDecision.AWAITING:
            fields.update(decided_by=None, comment=None)
        text = ending.text
        try:
            final = await self.store.decide_remediation(
                record.id,
                from_decisions={RemediationDecision.DECIDING},
                to=ending.decision,
                **fields,
            )
        except StoreUnavailable as exc:
            # Sent (or refused) already: said as it is, and recorded once the store is back.
            log.warning("remediation %s: its decision kept for the store: %s", record.id, exc)
            self.backlog.keep(
                f"recording the decision on remediation {record.remediation_id}",
                functools.partial(self._record_decision, record.id, ending.decision, fields),
            )
            final = record.model_copy(update={"decision": ending.decision, **fields})
            text += " " + _KEPT
        REMEDIATION_DECISIONS.labels(ending.outcome).inc()
        await self._audit_click(user, final or record, verb, ending.outcome, detail=text)
        await self.notifier.remediation_decided(
            final or record, ending.outcome, text, ending.remediation
        )
        if ending.outcome in ("failed", "unknown"):
            return error(text)
        return notice(text)

    async def _record_decision(
        self, record_id: str, decision: RemediationDecision, fields: dict[str, str | None]
    ) -> None:
        await self.store.decide_remediation(
            record_id, from_decisions={RemediationDecision.DECIDING}, to=decision, **fields
        )

    async def _audit_click(
        self,
        user: str,
        record: RemediationRecord,
        verb: Verb,
        outcome: str,
        *,
        detail: str = "",
    ) -> None:
        audit = functools.partial(
            self.access.audit,
            user,
            f"remediation_{verb}",
            project=record.project,
            cluster_id=record.cluster_id,
            outcome=outcome,
            remediation=record.remediation_id,
            node=record.node,
            record=record.id,
            detail=detail,
        )
        await self.backlog.attempt(f"auditing a {verb} of {record.remediation_id}", audit)


@dataclass(frozen=True)
class _Ending:
    decision: RemediationDecision
    outcome: DecisionOutcome
    text: str
    provider_state: str | None = None
    remediation: Remediation | None = None  # as Together last said: the message keeps "why"


def _answer_lost(record: RemediationRecord) -> bool:
    if record.decision is RemediationDecision.UNKNOWN:
        return True
    stale = datetime.now(UTC) - record.updated_at > STALE_DECISION
    return record.decision is RemediationDecision.DECIDING and stale


def _failure(exc: ProviderError) -> _Ending:
    if exc.may_have_applied:
        return _Ending(
            RemediationDecision.UNKNOWN,
            "unknown",
            f"Together may or may not have taken it ({exc.user_message}); it is not sent "
            "again, and its thread will follow what Together reports.",
        )
    return _Ending(
        RemediationDecision.AWAITING,
        "failed",
        f"Together did not take it: {exc.user_message}. The buttons are back; try again.",
    )


async def _bounded_gather(calls: list[Coroutine[Any, Any, _T]], limit: int) -> list[_T]:
    """Await every call, at most ``limit`` at a time; the first error cancels the rest."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Coroutine[Any, Any, _T]) -> _T:
        try:
            async with gate:
                return await call
        finally:
            call.close()  # one cancelled before its turn never ran: no "never awaited"

    tasks = [asyncio.ensure_future(one(call)) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
