"""Just before a change is sent: the checks that must hold then, in one place (the ``start``
transition's guard, bot.core.requests.transitions).

Every check in ``PreSend.checks`` may refuse the change then (nothing is sent): the
guardrails once more (a freeze may have begun since the approval, or the policy changed),
and for a scheduled change, under its cluster's lock, its grants and preview against the
cluster fetched again. The changed fields' values just before sending become the
request's ``prior_values``: what a revert goes back to (SPEC §9)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from bot.core.access import Refusal
from bot.core.guardrails.budget import BudgetGuard
from bot.core.guardrails.guard import Guard, stored_budget_override, stored_override, stored_size
from bot.core.policy import Role
from bot.core.requests.deps import RequestDeps
from bot.core.store import ChangeRequestRecord
from bot.errors import GpuopsError
from bot.providers.base import ChangePlan, ClusterState


def stale_text(old: ChangePlan, fresh: ChangePlan) -> str:
    changed = [
        f"{key} was {old.fingerprint.get(key)!s}, now {fresh.fingerprint.get(key)!s}"
        for key in sorted(set(old.fingerprint) | set(fresh.fingerprint))
        if old.fingerprint.get(key) != fresh.fingerprint.get(key)
    ]
    detail = "; ".join(changed) or "the change it would make differs"
    return f"the cluster changed since the preview ({detail}). Request it again."


log = logging.getLogger(__name__)


class SendRefused(GpuopsError):
    """A check just before sending failed: the change is refused, nothing was sent."""

    def __init__(self, why: str, kind: str) -> None:
        self.why = why
        self.kind = kind
        super().__init__(why)


@dataclass(frozen=True)
class AboutToSend:
    """What a check sees: the request, its plan, and the cluster fetched just now (None
    when it could not be fetched)."""

    record: ChangeRequestRecord
    plan: ChangePlan
    state: ClusterState | None


# A check raises SendRefused to stop the change; it returns nothing otherwise.
Check = Callable[[AboutToSend], Awaitable[None]]


class PreSend:
    """Fetches the cluster, runs every check, and says what the change will replace."""

    def __init__(self, deps: RequestDeps, checks: list[Check] | None = None) -> None:
        self.deps = deps
        self.guard = Guard(deps.access)
        self.budget = BudgetGuard(deps.access)
        # A scheduled change was checked when it was approved, maybe days ago: again now.
        self.checks: list[Check] = [
            self._guardrails_hold,
            self._grants_hold,
            self._preview_holds,
            *(checks or []),
        ]

    async def check(self, record: ChangeRequestRecord) -> dict[str, object]:
        """The ``prior_values`` to record; SendRefused to stop the change.

        A scheduled change's cluster is fetched again (its approval may be days old); any
        other was checked against the cluster at its approval a moment ago, so its plan's
        fingerprint holds the values it replaces and no extra call is made."""
        plan = ChangePlan.model_validate(record.plan["plan"])
        state = await self._fetch(record) if record.run_at is not None else None
        about = AboutToSend(record, plan, state)
        for check in self.checks:
            await check(about)
        return self._prior(plan, plan.fingerprint if state is None else state.current)

    async def _fetch(self, record: ChangeRequestRecord) -> ClusterState | None:
        try:
            return await self.deps.access.fetch(record.project, record.cluster_id)
        except Refusal as refusal:
            log.warning("change %s: not re-fetched before sending: %s", record.id, refusal)
            return None

    async def _guardrails_hold(self, about: AboutToSend) -> None:
        """The guardrails once more; a refused change ends failed, nothing sent."""
        record = about.record
        size = stored_size(record.plan)
        if size is None:  # made before guardrails were recorded with requests
            return
        overridden = stored_override(record.plan) is not None
        now = self.deps.clock()
        try:
            self.guard.check(record.project, record.kinds, size, now, overridden=overridden)
            # The budgets and quotas once more, at the price tables in force now (SPEC §13).
            budget = await self.budget.judge(record.project, size, now)
            if budget.band == "deny" and not stored_budget_override(record.plan):
                raise BudgetGuard.refusal(budget)
        except Refusal as refusal:
            raise SendRefused(f"not sent: {refusal.message}", refusal.kind) from None

    async def _grants_hold(self, about: AboutToSend) -> None:
        record = about.record
        if record.run_at is None:
            return
        people = [(record.requester, Role.operator, "the requester")]
        if record.needs_approval and record.decided_by and not record.break_glass:
            people.append((record.decided_by, Role.approver, "the approver"))
        for user, role, who in people:
            try:
                await self.deps.access.require(user, record.project, record.channel, role)
            except Refusal as refusal:
                why = f"{who} (<@{user}>) no longer may make this change: {refusal.message}"
                raise SendRefused(why, "grant_revoked") from None

    async def _preview_holds(self, about: AboutToSend) -> None:
        record, old, state = about.record, about.plan, about.state
        if record.run_at is None:
            return
        if state is None:
            raise SendRefused(
                f"{record.cluster_id} could not be fetched to check it before sending; "
                "nothing was changed. Request it again.",
                "provider_unavailable",
            )
        try:
            fresh = self.deps.access.make_plan(
                record.project, state, record.action, record.plan["inputs"]
            )
        except Refusal as refusal:
            why = f"stale: the change no longer applies — {refusal.message}"
            raise SendRefused(why, "stale") from None
        if fresh.fingerprint != old.fingerprint or fresh.body != old.body:
            raise SendRefused(f"stale: {stale_text(old, fresh)}", "stale")

    def _prior(self, plan: ChangePlan, current: Mapping[str, object]) -> dict[str, object]:
        fields = {name: current.get(name) for name in plan.body if name in current}
        inverse = self.deps.access.adapter_for(plan.project).inverse(plan, fields)
        return {"fields": fields, "inverse": None if inverse is None else inverse.model_dump()}
