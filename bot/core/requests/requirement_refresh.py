"""Pending requests after a policy reload (SPEC §8: a new policy governs the approvals of
requests made before it): each whose approval requirement changed, or whose earlier
approvals stopped (or started again) counting, has it noted (one replica does it,
compare-and-set), audited, shown on its approval prompt, and said in its thread, so what
people read is what approving it takes now and who of its approvers still counts."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from bot.core.guardrails.approvals import Requirement, requirement_of, shown_requirement
from bot.core.notifier import RequestEvent
from bot.core.requests.deps import RequestDeps
from bot.core.store import AuditRow, ChangeRequestRecord, RequestState

log = logging.getLogger(__name__)

PENDING_AT_MOST = 1000  # pending requests looked at per reload (they are few)


def _noted(requirement: Requirement) -> dict[str, object]:
    noted = requirement.as_json()
    del noted["by"]
    return noted


class RequirementRefresh:
    """Brings pending requests' noted approval requirement in line with the policy."""

    def __init__(
        self, deps: RequestDeps, eligible: Callable[[str, ChangeRequestRecord], Awaitable[bool]]
    ) -> None:
        self.deps = deps
        self.eligible = eligible  # whether an earlier approval still counts (Decisions')

    async def after_reload(self) -> int:
        """Note, show and tell each pending request whose requirement changed; how many."""
        pending = await self.deps.store.list_requests(
            states=[RequestState.PENDING], limit=PENDING_AT_MOST
        )
        changed = 0
        for record in pending:
            try:
                changed += await self._refresh(record)
            except Exception:  # one request's messages must not keep the others stale
                log.exception("could not show %s's new approval rule", record.id)
        return changed

    async def _refresh(self, record: ChangeRequestRecord) -> bool:
        now = requirement_of(self.deps.policy, record.project, record.kinds, record.approvals)
        before = shown_requirement(record.approvals, record.kinds)
        # The approvals that still count under it (a grant or a group may be gone); the
        # others are noted too, so that the prompt counts and names only those that count.
        counted = [u for u in record.approvers if await self.eligible(u, record)]
        uncounted = [u for u in record.approvers if u not in counted]
        if now == before and uncounted == record.uncounted:
            return False
        wanted = {**_noted(now), "uncounted": uncounted}  # who approved so far stays
        if (record.approvals or {}).get("ask") is not None:  # whom its prompt asked
            wanted["ask"] = (record.approvals or {})["ask"]
        audit = AuditRow(
            actor="gpuops",
            event="approval_rule_changed",
            outcome=f"{len(counted)} of {now.needed}",
            detail={
                "before": {**_noted(before), "uncounted": record.uncounted},
                "after": wanted,
                "why": "policy reload",
            },
        )
        noted = await self.deps.store.note_requirement(record, wanted, audit)
        if noted is None:
            return False  # another replica noted it first, or it was decided meanwhile
        # The note's progress names whoever no longer counts (bot.slack.render.requests).
        enough = len(counted) >= now.needed
        text = "it has the approvals it needs now: the next Approve sends it" if enough else None
        await self.deps.notifier.request_changed(
            noted, RequestEvent("rule_changed", "gpuops", text)
        )
        return True
