"""Other requests open on the cluster a new request is opened on: the older one asking for
the same change (the new one yields to it), and the note that tells of the others."""

from __future__ import annotations

from bot.core.requests.deps import RequestDeps
from bot.core.requests.view import STALE_AT_APPROVAL, state_words
from bot.core.store import ChangeRequestRecord, OpenBeside, RequestState

OPEN_STATES = frozenset({RequestState.PENDING, RequestState.APPROVED, RequestState.EXECUTING})


async def duplicate_of(
    deps: RequestDeps, record: ChangeRequestRecord, others: list[OpenBeside]
) -> ChangeRequestRecord | None:
    """An older open request on the cluster asking for the same change (the same action
    with the same fields): the re-check at approval cannot tell them apart when the
    change leaves the cluster as it was (a restart), so both would run. Read only when
    others are open (the opening's own transaction told which); of two opened at once
    that see each other, the younger yields."""
    if not others:
        return None
    open_here = await deps.store.list_requests(
        states=OPEN_STATES, project=record.project, cluster_id=record.cluster_id
    )
    inputs = record.plan.get("inputs")
    older = [
        other
        for other in open_here
        if other.id != record.id
        and other.action == record.action
        and other.plan.get("inputs") == inputs
        and (other.created_at, other.id) < (record.created_at, record.id)
    ]
    return min(older, key=lambda o: (o.created_at, o.id), default=None)


def beside_note(record: ChangeRequestRecord, others: list[OpenBeside]) -> str | None:
    """What to tell about other requests open on the same cluster, None when none is."""
    if not others:
        return None
    listed = ", ".join(f"{o.id} ({state_words(str(o.state))})" for o in others[:5])
    more = f" and {len(others) - 5} more" if len(others) > 5 else ""
    verb = "is" if len(others) == 1 else "are"
    return (
        f"Note: {listed}{more} {verb} also open on {record.cluster_name} "
        f"({record.cluster_id}). Each is re-checked against the cluster when approved: "
        f"the one approved second fails as {STALE_AT_APPROVAL} if the first changed what "
        "its preview was made from."
    )
