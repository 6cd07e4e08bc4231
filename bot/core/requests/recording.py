"""Recording a sent change's outcome under its execution lease, and telling it.

The finish writes the result with the cluster's lock and the lease freed, in one
transaction; an executor fenced off writes nothing. A result recorded late (kept through an
outage) is told in words of its own, and one that replaced ``unknown`` as the correction it
was; the cluster summary follows in the thread, the mirror last."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace

from bot.core.requests import table, transitions
from bot.core.requests.deps import RequestDeps
from bot.core.requests.fencing import LeaseKeeper
from bot.core.requests.followup import FollowUp
from bot.core.requests.outcomes import Result, Unrecorded
from bot.core.requests.view import outcome_headline
from bot.core.store import (
    TERMINAL_STATES,
    ChangeRequestRecord,
    Lease,
    OutcomeRecorded,
    RequestState,
    StoreUnavailable,
)
from bot.providers.base import ClusterSummary
from bot.providers.errors import ProviderError
from bot.redact import redact

log = logging.getLogger(__name__)


class Recorder:
    """Writes a sent change's result under its lease and reports it; frees what it held."""

    def __init__(self, deps: RequestDeps, follow_up: FollowUp) -> None:
        self.deps = deps
        self.follow_up = follow_up

    async def free(
        self, record: ChangeRequestRecord, lease: Lease | None, *, ended: bool | None
    ) -> None:
        """Give up the lease (and, when the request has ended, the cluster) outside a
        finish; ``ended`` None: read whether it has. Best effort: a lock left behind becomes
        free once the lease lapses and the call deadline passes."""
        if lease is None:
            return
        store = self.deps.store
        try:
            if ended is None:
                current = await store.get_request(record.id)
                ended = current is not None and current.state in TERMINAL_STATES
            cluster = transitions.cluster_of(record) if ended else None
            await store.release_execution(record.id, lease, cluster=cluster)
        except StoreUnavailable as exc:
            log.warning("change %s: could not free its lock or lease: %s", record.id, exc)

    async def record_late(self, item: Unrecorded) -> None:
        if not await self.record(item.record, item.keeper, item.result, late=True):
            lease = None if item.keeper is None or item.keeper.lost else item.keeper.lease
            await self.free(item.record, lease, ended=None)

    async def record(
        self, record: ChangeRequestRecord, keeper: LeaseKeeper | None, result: Result, *, late: bool
    ) -> bool:
        """Write ``result`` under the keeper's lease (with the lock and lease freed) and
        report it; nothing when fenced off. True when the finish freed them."""
        transition = table.NOT_SENT if not result.sent else table.finished(result.to)
        change = transitions.Change(
            transition,
            record.requester,
            outcome=str(result.to),
            fields={"result_message": redact(result.message)},
            detail={"message": result.message, "kind": result.kind},
            unmirrored=True,
        )
        if keeper is not None:
            keeper.releasing = True
        try:
            status, done = await transitions.finish(
                self.deps, record, None if keeper is None else keeper.lease, change
            )
        except StoreUnavailable:
            if keeper is not None:
                keeper.releasing = False
            raise
        if done is None or status in (OutcomeRecorded.FENCED, OutcomeRecorded.MISSING):
            log.warning(
                "change %s: result not recorded (%s); another holder has it", record.id, status
            )
            return False
        if status is OutcomeRecorded.ALREADY_RECORDED:
            if not late:
                return True
            # Late and already recorded: the earlier write landed but its answer was lost,
            # so nobody has been told yet; the thread was promised a confirmation. If that
            # write replaced "unknown", it is told as the correction it was.
            if await self._was_unknown(record.id):
                status = OutcomeRecorded.CORRECTED_UNKNOWN
        if status is OutcomeRecorded.CORRECTED_UNKNOWN:
            change = replace(change, transition=table.corrected(result.to))
        text = self._told(status, result, late=late)
        try:
            await self._report(record, done, replace(change, text=text), result.summary)
        except StoreUnavailable as exc:  # recorded: what is left is told without the store
            log.error(
                "change %s: recorded; a store write while reporting it failed: %s", record.id, exc
            )
        return True

    async def _was_unknown(self, request_id: str) -> bool:
        """Whether the request was marked ``unknown`` on its way (its audit trail says so);
        False when the store cannot say (the confirmation is true either way)."""
        try:
            trail = await self.deps.store.list_audit(request_id=request_id, limit=100)
        except StoreUnavailable:
            return False
        return any(entry.outcome == RequestState.UNKNOWN.value for entry in trail)

    @staticmethod
    def _told(status: OutcomeRecorded, result: Result, *, late: bool) -> str:
        message = result.message
        if status is OutcomeRecorded.CORRECTED_UNKNOWN:
            message = (
                "Correction: this change was marked unknown while gpuops could not reach its "
                f"database. What really happened: {message}"
            )
        elif late and result.sent and status is OutcomeRecorded.ALREADY_RECORDED:
            message = (
                "gpuops lost contact with its database while sending this change; its "
                f"result was recorded, confirmed now that the database is back: {message}"
            )
        elif late and result.sent:
            message = (
                "gpuops lost contact with its database while sending this change; the "
                f"result, recorded now that it is back: {message}"
            )
        return message

    async def _report(
        self,
        record: ChangeRequestRecord,
        done: ChangeRequestRecord,
        change: transitions.Change,
        summary: ClusterSummary | None,
    ) -> None:
        summary = await self._summary_after(done, summary)
        # A correction or a late result is told in words of its own.
        follows = summary is not None and change.text == change.detail.get("message")
        await transitions.announce(
            self.deps, record, done, replace(change, summary_follows=follows)
        )
        if summary is not None:
            await self._show_result(done, summary)
        # Mirrored last: whoever reads the notify channel finds the whole story in the thread.
        await transitions.mirror(self.deps, done, outcome_headline(done))

    async def _summary_after(
        self, done: ChangeRequestRecord, summary: ClusterSummary | None
    ) -> ClusterSummary | None:
        """The cluster as the provider's answer left it; fetched when the outcome is unknown."""
        if summary is None and done.state is RequestState.UNKNOWN:
            with contextlib.suppress(ProviderError):
                fetched = await self.deps.access.adapter_for(done.project).get_cluster(
                    done.cluster_id
                )
                return fetched.summary
        return summary

    async def _show_result(self, done: ChangeRequestRecord, summary: ClusterSummary) -> None:
        deps = self.deps
        to = done.state
        summary_ts = await deps.notifier.result(done, summary)
        if summary_ts:
            done = done.model_copy(update={"summary_ts": summary_ts})
        # Only a follow-up edits the summary again: it stores the summary's ts with its own
        # end time, in one write; a steady result needs no write after it is shown.
        if to is RequestState.SUCCEEDED and deps.poll_seconds > 0 and not summary.steady:
            await self.follow_up.begin(done)
