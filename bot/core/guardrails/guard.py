"""The guardrails as one check a change request goes through when it is made, at each
approval and just before it is sent: limits, then freezes (unless an admin overrode)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from bot.core.access import Access, Refusal
from bot.core.guardrails.checks import ChangeSize, limit_refusal, size_of
from bot.core.guardrails.freezes import FreezeWindow, active_freeze, frozen_text, when
from bot.core.policy import Role
from bot.core.spend.rates import gpus_of
from bot.providers.base import ChangePlan, ClusterState

OVERRIDE_HINT = ' An admin may add override="why" to go ahead.'


@dataclass(frozen=True)
class Override:
    """An admin's override of a freeze, kept with the request."""

    by: str
    reason: str
    freeze: str
    until: str

    def as_json(self) -> dict[str, str]:
        return {"by": self.by, "reason": self.reason, "freeze": self.freeze, "until": self.until}


def with_gpus(size: ChangeSize, gpus: int | None) -> ChangeSize:
    """A size counted in nodes (E2E) with its GPUs too, for a team's GPU quota (SPEC
    §13): the cluster's GPUs now, scaled by its nodes after the change."""
    before, after = size.nodes_before, size.nodes_after
    if size.gpus_before is not None or gpus is None or not before or after is None:
        return size
    return size.model_copy(update={"gpus_before": gpus, "gpus_after": gpus * after // before})


def _stored_guard(plan_json: Mapping[str, object], part: str) -> object:
    guard = plan_json.get("guard")
    return guard.get(part) if isinstance(guard, dict) else None


def stored_size(plan_json: Mapping[str, object]) -> ChangeSize | None:
    raw = _stored_guard(plan_json, "size")
    return ChangeSize.model_validate(raw) if isinstance(raw, dict) else None


def stored_budget_override(plan_json: Mapping[str, object]) -> bool:
    """Whether an admin overrode the budget when the request was made."""
    return isinstance(_stored_guard(plan_json, "budget_override"), dict)


def stored_override(plan_json: Mapping[str, object]) -> Override | None:
    raw = _stored_guard(plan_json, "override")
    if not isinstance(raw, dict):
        return None
    return Override(**{k: str(raw.get(k, "")) for k in ("by", "reason", "freeze", "until")})


def guard_json(size: ChangeSize, override: Override | None) -> dict[str, object]:
    return {
        "size": size.model_dump(mode="json"),
        "override": override.as_json() if override else None,
    }


class Guard:
    """Limits and freezes of the policy in force (Access holds it)."""

    def __init__(self, access: Access) -> None:
        self.access = access

    def size(self, state: ClusterState, plan: ChangePlan, now: datetime) -> ChangeSize:
        config = self.access.policy.project(plan.project)
        size = size_of(config.descriptor, state, plan, config.price_table, now.date())
        return with_gpus(size, gpus_of(state.summary))

    def check(
        self, project: str, kinds: list[str], size: ChangeSize, now: datetime, *, overridden: bool
    ) -> None:
        """Raise a Refusal naming the limit or the freeze that forbids this change now."""
        policy = self.access.policy
        config = policy.projects.get(project)
        if config is None:  # removed by a reload since the request was made
            raise Refusal(f"{project} is no longer in the policy.", kind="not_authorized")
        why = limit_refusal(project, config.limits, size)
        if why is not None:
            raise Refusal(f"{why}. Only a policy change can raise a limit.", kind="limit")
        window = active_freeze(policy.freezes, project, kinds, now)
        if window is not None and not overridden:
            raise Refusal(f"{frozen_text(project, window)}.{OVERRIDE_HINT}", kind="frozen")

    async def override(
        self,
        user: str,
        channel: str,
        project: str,
        kinds: list[str],
        now: datetime,
        reason: str | None,
        *,
        budget_overridden: bool = False,
    ) -> Override | None:
        """An admin's override of the freeze in force; None when none is asked for (or
        the override is a budget's, and no freeze holds)."""
        if reason is None:
            return None
        window: FreezeWindow | None = active_freeze(self.access.policy.freezes, project, kinds, now)
        if window is None and budget_overridden:
            return None
        if window is None:
            raise Refusal(
                f"{project} is not frozen now; send the change again without override=.",
                kind="usage",
            )
        await self.access.require(user, project, channel, Role.admin, doing="overriding a freeze")
        return Override(user, reason, window.freeze.name, when(window.end))
