"""The compare-and-set writes of a request outside an execution: a transition, its fields,
an approval and a noted requirement, each one transaction with its audit entry."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from bot.core.store.records import (
    AuditRow,
    ChangeRequestRecord,
    Lease,
    RequestState,
)
from bot.core.store.requests.fast_path import FastPathMixin
from bot.core.store.requests.reads import ReadsMixin
from bot.core.store.requests.statements import transition_values, update_in, validated_updates


class WritesMixin(FastPathMixin, ReadsMixin):
    async def transition(
        self,
        request_id: str,
        *,
        from_states: Collection[RequestState],
        to: RequestState,
        fence: Lease | None = None,
        audit: AuditRow | None = None,
        **updates: object,
    ) -> ChangeRequestRecord | None:
        """Move the request to ``to`` if, and only if, it is in one of ``from_states`` (and,
        with ``fence``, that lease is still held with that token); ``audit`` is appended in
        the same transaction when it moves.

        Returns the updated record if this call won, None if the request was elsewhere, the
        fence was lost, or there is no such request. ``updates`` may set decided_by,
        decision_note, break_glass, result_message, summary_ts and root_ts in the same
        statement.
        """
        if not from_states:
            raise ValueError("from_states must name at least one state")
        values = transition_values(to, updates)
        async with self._begin() as conn:
            return await self._move_in(
                conn, request_id, values, audit, from_states=from_states, fence=fence
            )

    async def update_fields(
        self, request_id: str, *, fence: Lease | None = None, **updates: object
    ) -> ChangeRequestRecord | None:
        """Set non-state fields (root_ts, summary_ts, result_message, …); None if no such row
        (or, with ``fence``, if that lease has changed hands)."""
        if "state" in updates:
            raise ValueError("update_fields cannot change state; use transition()")
        values = validated_updates(updates)
        if not values and fence is None:
            return await self.get_request(request_id)
        async with self._begin() as conn:
            return await update_in(conn, request_id, values, fence=fence)

    async def decide_approval(
        self,
        seen: ChangeRequestRecord,
        approver: str,
        requirement: Mapping[str, object],
        *,
        to: RequestState,
        audit: AuditRow,
        **updates: object,
    ) -> ChangeRequestRecord | None:
        """One approval as one transaction: ``approver`` added to the approvals of the
        pending request ``seen`` (and what it now needs noted), its state set to ``to``
        (``approved`` when this approval completes the rule, else ``pending``) with
        ``updates``, and ``audit`` appended, compare-and-set on ``seen``'s version. None
        when the request moved meanwhile (another approval, a decision): nothing written,
        the caller reads it again. An approver already counted is not added twice."""
        noted = {**(seen.approvals or {}), **requirement}
        approvers = seen.approvers if approver in seen.approvers else [*seen.approvers, approver]
        values = transition_values(to, updates)
        values["approvals"] = {**noted, "by": approvers}
        return await self._update_pending(seen, values, audit)

    async def confirm_request(
        self, seen: ChangeRequestRecord, *, to: RequestState, audit: AuditRow, **updates: object
    ) -> ChangeRequestRecord | None:
        """An agent's proposal confirmed by its requester, as one transaction: ``confirm``
        set to "confirmed", the state set to ``to`` (``approved`` when it needs no approval,
        else it stays ``pending`` for its approvers) with ``updates``, and ``audit``
        appended, compare-and-set on ``seen``'s version: None when it moved meanwhile (a
        second click, a cancel, its expiry)."""
        if seen.confirm != "awaiting":
            return None
        values = transition_values(to, {**updates, "confirm": "confirmed"})
        return await self._update_pending(seen, values, audit)

    async def note_requirement(
        self, seen: ChangeRequestRecord, requirement: Mapping[str, object], audit: AuditRow
    ) -> ChangeRequestRecord | None:
        """Note what approving a pending request takes now (a policy reload changed it: the
        approvals so far, a break glass among them, stay), with its audit entry, compare-
        and-set on the version ``seen`` has: None when the request moved meanwhile
        (another replica noted it first, or someone decided it)."""
        values = {"approvals": {**(seen.approvals or {}), **requirement}}
        return await self._update_pending(seen, values, audit)

    async def _update_pending(
        self, seen: ChangeRequestRecord, values: Mapping[str, object], audit: AuditRow
    ) -> ChangeRequestRecord | None:
        """Write ``values`` and ``audit`` (named after the request) in one transaction if the
        request is still pending at the version ``seen`` has; None when it moved meanwhile."""
        named = {"request_id": seen.id, "project": seen.project, "cluster_id": seen.cluster_id}
        async with self._begin() as conn:
            return await self._move_in(
                conn,
                seen.id,
                values,
                audit.model_copy(update=named),
                from_states=(RequestState.PENDING,),
                expected_version=seen.version,
            )
