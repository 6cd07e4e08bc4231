"""The on-call check of a decision (SPEC §16), for the decisions to call at each click and
for each earlier approval they count again: the decider must be an eligible on-call
approver now (or in the rule's groups), the rule's fallback holding while the on-call tool
gives no answer (audited as ``oncall_fallback``); and the requester on call counts as one
approval when the rule says ``requester_on_call_counts_as: 1``. An approval given while
its approver was on call keeps counting after their shift ends: it was judged at its click."""

from __future__ import annotations

import logging
from datetime import datetime

from bot.core.access import Access, Refusal
from bot.core.guardrails.approvals import Requirement, requirement_in_force
from bot.core.oncall import Verdict
from bot.core.store import ChangeRequestRecord, StoreUnavailable

log = logging.getLogger(__name__)


def was_on_call(record: ChangeRequestRecord) -> tuple[str, ...]:
    """Who was on call (Slack users) when the request was made, as its prompt said."""
    noted = (record.approvals or {}).get("oncall_now") or {}
    people = noted.get("on_call", []) if isinstance(noted, dict) else []
    return tuple(str(p["slack"]) for p in people if isinstance(p, dict) and p.get("slack"))


async def judged(
    access: Access,
    user: str,
    record: ChangeRequestRecord,
    doing: str,
    now: datetime,
    *,
    requirement: Requirement | None = None,
) -> Verdict | None:
    """The on-call verdict of ``user`` doing ``doing`` (``approve R-1``) on ``record`` under
    the rule in force; None when the rule has no on-call approvers."""
    rule = requirement or requirement_in_force(access.policy, record.project, record.kinds)
    if not rule.oncall:
        return None
    gate = access.oncall
    if gate is None:
        raise Refusal(
            f"{record.id} needs an on-call approver and this gpuops reads no on-call tool; "
            "nothing was recorded.",
            kind="oncall_unavailable",
        )
    verdict = await gate.judge(
        user,
        rule,
        doing=doing,
        opened_at=record.created_at,
        now=now,
        was_on_call=was_on_call(record),
    )
    if verdict.how in ("fallback_groups", "fallback_refuse"):
        await _audit_fallback(access, user, record, rule, verdict)
    return verdict


async def require_on_call(
    access: Access, user: str, record: ChangeRequestRecord, doing: str, now: datetime
) -> Verdict | None:
    """``judged``, raising the Refusal (its words, who is on call mentioned) when not
    allowed."""
    verdict = await judged(access, user, record, doing, now)
    if verdict is not None and not verdict.allowed:
        kind = "not_on_call" if verdict.how == "not_on_call" else "oncall_unavailable"
        raise Refusal(verdict.text, kind=kind, mentions=verdict.mentions)
    return verdict


async def requester_counts(
    access: Access, record: ChangeRequestRecord, now: datetime
) -> Verdict | None:
    """The requester's own approval counts as one when the rule says
    ``requester_on_call_counts_as: 1`` and they are on call now; their verdict then."""
    rule = requirement_in_force(access.policy, record.project, record.kinds)
    if not rule.oncall or not rule.requester_counts_as:
        return None
    verdict = await judged(
        access, record.requester, record, f"approve {record.id}", now, requirement=rule
    )
    return verdict if verdict is not None and verdict.how == "on_call" else None


async def _audit_fallback(
    access: Access, user: str, record: ChangeRequestRecord, rule: Requirement, verdict: Verdict
) -> None:
    fault = verdict.now.fault
    try:
        await access.audit(
            user,
            "oncall_fallback",
            project=record.project,
            cluster_id=record.cluster_id,
            request_id=record.id,
            outcome="allowed" if verdict.allowed else "refused",
            fallback=rule.fallback,
            fault=fault.fault if fault is not None else "",
            reason=verdict.text,
        )
    except StoreUnavailable as exc:
        log.error("%s: could not audit the on-call fallback: %s", record.id, exc)
