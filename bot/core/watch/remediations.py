"""Node remediations (a provider capability) in the notify channel (SPEC §7.1): post each
one newly awaiting approval once, follow it until it ends, and let one approver's click
decide it; every word about the provider is its descriptor's title.

A decision is sent at most once: the click that moves the stored record from ``awaiting``
to ``deciding`` (compare-and-set) is the only one that calls the provider; approve and reject
are never retried once they may have been processed (bot.core.watch.remediation_clicks)."""

from __future__ import annotations

import asyncio
import bisect
import functools
import logging
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from bot.core.access import Access
from bot.core.answers import Reply
from bot.core.lifecycle import remediations as lifecycle
from bot.core.lifecycle.remediations import Move
from bot.core.notifier import NotDelivered
from bot.core.store.watch import (
    NewRemediationRecord,
    RemediationDecision,
    RemediationRecord,
    WatchStore,
)
from bot.core.watch.backlog import StoreBacklog
from bot.core.watch.keys import remediation_key
from bot.core.watch.notifier import WatchNotifier
from bot.core.watch.remediation_clicks import RemediationClicks, RemediationsFor, Verb
from bot.metrics import REMEDIATION_DECISIONS, WATCH_ALERTS
from bot.providers.base import ClusterSummary, RemediationDecisions
from bot.providers.errors import (
    ProviderError,
    ProviderNotFound,
    ProviderRateLimited,
)
from bot.providers.remediations import FINAL_STATES, Remediation, RemediationState

log = logging.getLogger(__name__)

_T = TypeVar("_T")

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
        self.clicks = RemediationClicks(
            access=access,
            store=store,
            notifier=notifier,
            remediations_for=remediations_for,
            backlog=self.backlog,
        )
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

    # ---- deciding (bot.core.watch.remediation_clicks) ---------------------------------

    async def may_decide(
        self, *, user: str, channel: str, record_id: str, verb: Verb
    ) -> Reply | None:
        """None if ``user`` may decide it here (and it still awaits a decision); else the
        refusal (audited) to show them — before a reject form is opened for nothing."""
        return await self.clicks.may_decide(
            user=user, channel=channel, record_id=record_id, verb=verb
        )

    async def decide(
        self, *, user: str, channel: str, record_id: str, verb: Verb, comment: str | None = None
    ) -> Reply:
        """One click on approve or reject; the answer is for the person who clicked."""
        return await self.clicks.decide(
            user=user, channel=channel, record_id=record_id, verb=verb, comment=comment
        )


def _answer_lost(record: RemediationRecord) -> bool:
    if record.decision is RemediationDecision.UNKNOWN:
        return True
    stale = datetime.now(UTC) - record.updated_at > STALE_DECISION
    return record.decision is RemediationDecision.DECIDING and stale


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
