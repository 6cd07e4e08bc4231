"""Node remediations (a provider capability) in the notify channel (SPEC §7.1): post each
one newly awaiting approval once, follow it until it ends, and let one approver's click
decide it; every word about the provider is its descriptor's title.

A decision is sent at most once: the click that moves the stored record from ``awaiting``
to ``deciding`` (compare-and-set) is the only one that calls the provider; approve and reject
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
from bot.core.lifecycle import remediations as lifecycle
from bot.core.lifecycle.remediations import Move
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
    """Posting, following and deciding the remediations of watched projects whose
    provider has them."""

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

    def _title(self, project: str) -> str:
        """How people name the project's provider (its descriptor's title)."""
        return self.access.policy.provider_title(project)

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
        claimed = await lifecycle.claim(
            self.store,
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
            give_up = functools.partial(lifecycle.give_back, self.store, claim, record)
            await self.backlog.attempt(f"giving back remediation {remediation.id}", give_up)
            return
        move = Move(
            lifecycle.POST,
            "gpuops",
            "posted",
            detail={"remediation": remediation.id, "node": remediation.node, "record": record.id},
        )
        posted = functools.partial(lifecycle.posted, self.store, claim, record, ts, move)
        await self.backlog.attempt(f"recording where remediation {remediation.id} is", posted)
        WATCH_ALERTS.labels("remediation").inc()

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
        had_buttons = record.decision is RemediationDecision.AWAITING
        closing = lifecycle.gone(record.decision)
        seen = record.decision if closing is lifecycle.GONE else None
        updated = await self._seen(
            record, closing, "gone", seen=seen, fields={"provider_state": GONE_STATE}
        )
        if updated is None:
            return
        log.info("remediation %s is gone at its provider: closed", record.remediation_id)
        await self.notifier.remediation_gone(updated, had_buttons)

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
            moved = await self._seen(
                record,
                lifecycle.LEFT_ELSEWHERE,
                remediation.state,
                reviewed_by=remediation.reviewed_by or "",
            )
            if moved is not None:
                REMEDIATION_DECISIONS.labels("elsewhere").inc()
                await self.notifier.remediation_left_elsewhere(moved, remediation)
                updated = moved
        if remediation.state != RemediationState.PENDING_APPROVAL:
            await self.notifier.remediation_progress(updated, remediation)

    async def _taken_unseen(
        self, record: RemediationRecord, remediation: Remediation
    ) -> RemediationRecord | None:
        """A decision whose answer was lost (or whose sender died), and Together no longer
        awaits one: it was decided, by that call or another. Said so, buttons removed."""
        provider = self._title(record.project)
        text = (
            f"{provider} no longer awaits a decision (it is {remediation.state} now). A "
            "decision started here was cut off before its answer was recorded, so which "
            f"decision {provider} took is not known here."
        )
        settled = await self._seen(
            record,
            lifecycle.TAKEN_UNSEEN,
            remediation.state,
            seen=record.decision,
            fields={"decided_by": None},  # not known: "already decided at Together" says it all
        )
        if settled is None:
            return None
        REMEDIATION_DECISIONS.labels("already_decided").inc()
        await self.notifier.remediation_decided(settled, "already_decided", text)
        return settled

    async def _reopen(self, record: RemediationRecord, remediation: Remediation) -> None:
        """A decision whose answer was lost (or whose sender died), and a poll since shows
        Together never took it (still awaiting approval): the buttons come back. A second
        decision cannot act twice: Together refuses one on a remediation no longer pending."""
        reopened = await self._seen(
            record,
            lifecycle.REOPEN,
            "awaiting",
            seen=record.decision,
            fields={"decided_by": None, "comment": None},
        )
        if reopened is None:
            return
        await self.notifier.remediation_reopened(reopened, remediation)

    async def _seen(
        self,
        record: RemediationRecord,
        transition: lifecycle.Transition,
        outcome: str,
        *,
        seen: RemediationDecision | None = None,
        fields: dict[str, str | None] | None = None,
        **detail: str,
    ) -> RemediationRecord | None:
        """Move it for what gpuops itself saw happen to it, audited as gpuops's."""
        move = Move(
            transition,
            "gpuops",
            outcome,
            seen=seen,
            fields=fields or {},
            detail={"remediation": record.remediation_id, **detail},
        )
        return await lifecycle.apply(self.store, record, move)

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
        return await self._send(user, won, verb, comment)

    async def _win(
        self, user: str, channel: str, record_id: str, verb: Verb, comment: str | None
    ) -> RemediationRecord | Reply:
        """The record if this click won the decision (compare-and-set, audited as being
        sent), else the answer."""
        record = await self._decidable(user, channel, record_id, verb)
        if isinstance(record, Reply):
            return record
        click = Move(
            lifecycle.CLICK,
            user,
            "sending",
            verb=verb,
            fields={"decided_by": user, "comment": comment},
            detail=_click_detail(record),
        )
        won = await lifecycle.apply(self.store, record, click)
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
        provider = self._title(record.project)
        try:
            if verb == "approve":
                result = await client.approve(ref, comment=comment)
            else:
                result = await client.reject(ref, comment=comment)
        except AlreadyDecided:
            ending = _Ending(
                RemediationDecision.ALREADY_DECIDED,
                "already_decided",
                f"Already decided at {provider}: someone decided it first.",
            )
        except ProviderError as exc:
            ending = _failure(exc, provider)
        else:
            decision, outcome, done = _DONE[verb]
            said = f"{done}; {provider} says {result.state}."
            ending = _Ending(decision, outcome, said, result.state, result)
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
        move = Move(
            lifecycle.sent(ending.decision),
            user,
            ending.outcome,
            verb=verb,
            fields=fields,
            detail=_click_detail(record, text),
        )
        try:
            final = await lifecycle.apply(self.store, record, move)
        except StoreUnavailable as exc:
            # Sent (or refused) already: said as it is, and recorded once the store is back.
            log.warning("remediation %s: its decision kept for the store: %s", record.id, exc)
            text += " " + _KEPT
            kept = replace(move, detail=_click_detail(record, text))
            self.backlog.keep(
                f"recording the decision on remediation {record.remediation_id}",
                functools.partial(self._record_decision, record, kept),
            )
            final = record.model_copy(update={"decision": ending.decision, **fields})
        else:
            if final is None:  # moved meanwhile: what the call did is audited still
                await self._audit_click(user, record, verb, ending.outcome, detail=text)
        REMEDIATION_DECISIONS.labels(ending.outcome).inc()
        await self.notifier.remediation_decided(
            final or record, ending.outcome, text, ending.remediation
        )
        if ending.outcome in ("failed", "unknown"):
            return error(text)
        return notice(text)

    async def _record_decision(self, record: RemediationRecord, move: Move) -> None:
        await lifecycle.apply(self.store, record, move)

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
            **_click_detail(record, detail),
        )
        await self.backlog.attempt(f"auditing a {verb} of {record.remediation_id}", audit)


def _click_detail(record: RemediationRecord, detail: str = "") -> dict[str, str]:
    """What a click's audit entry says of the remediation (``detail``: what it was told)."""
    return {
        "remediation": record.remediation_id,
        "node": record.node,
        "record": record.id,
        "detail": detail,
    }


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


def _failure(exc: ProviderError, provider: str) -> _Ending:
    if exc.may_have_applied:
        return _Ending(
            RemediationDecision.UNKNOWN,
            "unknown",
            f"{provider} may or may not have taken it ({exc.user_message}); it is not sent "
            f"again, and its thread will follow what {provider} reports.",
        )
    return _Ending(
        RemediationDecision.AWAITING,
        "failed",
        f"{provider} did not take it: {exc.user_message}. The buttons are back; try again.",
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
