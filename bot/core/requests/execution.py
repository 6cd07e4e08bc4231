"""Executing an approved change exactly once.

Lock its cluster, hold the execution lease (with a heartbeat), send it, and settle the
outcome — ``unknown`` when it may have applied."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from bot.core.requests.followup import FollowUp
from bot.core.requests.settle import Change, RequestDeps, mirror, settle
from bot.core.requests.view import state_words
from bot.core.store import TERMINAL_STATES, ChangeRequestRecord, RequestState
from bot.providers.base import ChangePlan, ClusterSummary
from bot.providers.errors import ProviderError
from bot.redact import redact

log = logging.getLogger(__name__)


def _start(actor: str) -> Change:
    return Change(
        "executing",
        actor,
        frozenset({RequestState.APPROVED}),
        RequestState.EXECUTING,
        "executing",
    )


class Execution:
    """Sends approved changes, each exactly once across replicas."""

    def __init__(self, deps: RequestDeps, follow_up: FollowUp) -> None:
        self.deps = deps
        self.follow_up = follow_up

    async def execute(self, request_id: str, *, actor: str) -> None:
        deps = self.deps
        record = await deps.store.get_request(request_id)
        if record is None or record.state is not RequestState.APPROVED:
            return
        if not await self._lock_cluster(record):
            return
        # Hold the execution lease before the request shows as executing: a replica's
        # recover_interrupted must never find it executing without a live holder.
        lease = f"exec:{record.id}"
        deps.in_flight.start(record.id)
        heartbeat: asyncio.Task[None] | None = None
        running: ChangeRequestRecord | None = None
        try:
            if await deps.store.acquire_lease(lease, deps.instance_id, deps.exec_lease_seconds):
                heartbeat = deps.tasks.spawn(self._heartbeat(lease), f"heartbeat-{record.id}")
                running = await settle(deps, record, _start(actor))
            if running is not None:
                await self._run(running)
        finally:
            if heartbeat is not None:
                heartbeat.cancel()
            deps.in_flight.done(record.id)
            if running is not None or await self._ended(record.id):
                await self._unlock(record)
            await deps.store.release_lease(lease, deps.instance_id)

    async def _ended(self, request_id: str) -> bool:
        current = await self.deps.store.get_request(request_id)
        return current is not None and current.state in TERMINAL_STATES

    async def _unlock(self, record: ChangeRequestRecord) -> None:
        await self.deps.store.unlock_cluster(
            record.provider, record.project, record.cluster_id, record.id
        )

    async def _heartbeat(self, lease: str) -> None:
        deps = self.deps
        while True:
            await asyncio.sleep(deps.exec_lease_seconds / 3)
            await deps.store.acquire_lease(lease, deps.instance_id, deps.exec_lease_seconds)

    async def _lock_cluster(self, record: ChangeRequestRecord) -> bool:
        store = self.deps.store
        args = (record.provider, record.project, record.cluster_id)
        for _ in range(2):
            if await store.lock_cluster(*args, record.id):
                return True
            holder_id = await store.cluster_holder(*args)
            holder = await store.get_request(holder_id) if holder_id else None
            if holder is None or holder.state in TERMINAL_STATES:
                if holder_id:
                    await store.unlock_cluster(*args, holder_id)
                continue
            why = (
                f"another change ({holder.id}) is running on {record.cluster_id}; "
                "request again when it has finished."
            )
            busy = Change.ended_by_gpuops(
                "refused",
                {RequestState.APPROVED},
                RequestState.FAILED,
                why,
                audit_event="refused",
                outcome="cluster_busy",
            )
            await settle(self.deps, record, busy)
            return False
        return False

    async def _run(self, record: ChangeRequestRecord) -> None:
        plan = ChangePlan.model_validate(record.plan["plan"])
        adapter = self.deps.access.adapter_for(record.project)
        try:
            outcome = await adapter.apply(plan)
        except ProviderError as exc:
            to = RequestState.UNKNOWN if exc.may_have_applied else RequestState.FAILED
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
            await self._finish(record, RequestState.UNKNOWN, text, kind="internal")
            return
        await self._finish(record, RequestState.SUCCEEDED, outcome.message, outcome.summary)

    async def _finish(
        self,
        record: ChangeRequestRecord,
        to: RequestState,
        message: str,
        summary: ClusterSummary | None = None,
        *,
        kind: str = "ok",
    ) -> None:
        deps = self.deps
        finished = Change(
            "finished",
            record.requester,
            frozenset({RequestState.EXECUTING}),
            to,
            "result",
            outcome=str(to),
            text=message,
            fields={"result_message": redact(message)},
            detail={"message": message, "kind": kind},
        )
        done = await settle(deps, record, finished)
        if done is None:
            return
        await self._show_result(done, summary)
        # Mirrored last: whoever reads the notify channel finds the whole story in the thread.
        await mirror(deps, done, f"Change {state_words(str(to))}")

    async def _show_result(self, done: ChangeRequestRecord, summary: ClusterSummary | None) -> None:
        deps = self.deps
        to = done.state
        if summary is None and to is RequestState.UNKNOWN:
            with contextlib.suppress(ProviderError):
                fetched = await deps.access.adapter_for(done.project).get_cluster(done.cluster_id)
                summary = fetched.summary
        if summary is None:
            return
        summary_ts = await deps.notifier.result(done, summary)
        if summary_ts:
            done = await deps.store.update_fields(done.id, summary_ts=summary_ts) or done
        if to is RequestState.SUCCEEDED and deps.poll_seconds > 0 and not summary.steady:
            deps.tasks.spawn(self.follow_up.follow_up(done.id), f"follow-up-{done.id}")
