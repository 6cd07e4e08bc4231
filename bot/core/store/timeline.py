"""What happened in one channel, read from the audit trail a page at a time (SPEC §10): the
events of the requests made there (or mirrored there: their project's notify channel), and
the watcher's posts for the projects that notify there."""

from __future__ import annotations

import heapq
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from itertools import islice

from sqlalchemy import Select, and_, func, not_, or_, select

from bot.core.store.engine import StoreBase, require_aware
from bot.core.store.records import AuditEntry
from bot.core.store.tables import audit, change_requests

# Audit events of a change request that belong in its story (refusals of a click or a
# command are the refused person's business, not the channel's: see ``ChannelEvent``).
REQUEST_EVENTS = frozenset(
    {
        "requested",
        "approved",
        "approval_added",  # one approval of several needed
        "break_glass",  # a requester's own approval, one of several needed
        "approval_rule_changed",  # a policy reload changed what approving it takes
        "denied",
        "cancelled",
        "withdrawn",
        "expired",
        "executing",
        "result",
        "refused",
        "status",
        "freeze_override",  # an admin's override of a freeze, with its justification
        # A staged plan's steps and the people steering it (SPEC §14).
        "plan_begin",
        "plan_sent",
        "plan_send_failed",
        "plan_send_unknown",
        "plan_resolved_applied",
        "plan_pass",
        "plan_complete",
        "plan_hold",
        "plan_stop",
        "plan_pause",
        "plan_resume",
        "plan_abort",
        "plan_revert",
    }
)
# What the watcher posts in a project's notify channel, and the decisions taken there.
WATCH_EVENTS = frozenset(
    {
        "health_alert",
        "remediation_posted",
        "remediation_approve",
        "remediation_reject",
        "remediation_decided_elsewhere",
        "remediation_reopened",
        "reservation_reminder",
    }
)


@dataclass(frozen=True)
class ChannelEvent:
    """An audit entry and, for a request's event, what the request says of itself."""

    entry: AuditEntry
    cluster_name: str | None = None
    action: str | None = None

    @property
    def key(self) -> tuple[datetime, int]:
        """Where the next page starts after this event."""
        return self.entry.at, self.entry.id


# A refused click or command (its detail names the command) is shown to the refused person
# alone: never the channel's story, so never one of its events (a page or a count).
_TOLD_ONE_PERSON = and_(
    audit.c.event == "refused", audit.c.detail["command"].as_string().is_not(None)
)


class TimelineMixin(StoreBase):
    async def channel_events(
        self,
        *,
        channel: str,
        projects: Collection[str],
        notify_projects: Collection[str],
        since: datetime,
        until: datetime,
        after: tuple[datetime, int] | None = None,
        limit: int = 500,
    ) -> list[ChannelEvent]:
        """One page of ``channel``'s events in [since, until), in time order, after the
        ``after`` key; only of ``projects`` (``notify_projects``: those of them whose notify
        channel it is, so their requests are mirrored and their watch posts land there)."""
        require_aware("since", since)
        require_aware("until", until)
        if not projects:
            return []
        # Where requests are mirrored, one statement per project, each walking the (project,
        # at, id) index in order and stopping at ``limit``, merged here: one statement with
        # an IN of projects reads and sorts the whole window of all of them for every page.
        each = [[p] for p in sorted(projects)] if notify_projects else [list(projects)]
        found: list[list[ChannelEvent]] = []
        async with self._begin() as conn:
            for some in each:
                statement = _channel_statement(channel, some, notify_projects, since, until, after)
                statement = statement.order_by(audit.c.at, audit.c.id).limit(limit)
                rows = (await conn.execute(statement)).mappings().all()
                found.append([_event(dict(row)) for row in rows])
        return list(islice(heapq.merge(*found, key=lambda e: e.key), limit))

    async def count_channel_events(
        self,
        *,
        channel: str,
        projects: Collection[str],
        notify_projects: Collection[str],
        since: datetime,
        until: datetime,
        after: tuple[datetime, int] | None = None,
        up_to: int,
    ) -> int:
        """How many of ``channel``'s events ``channel_events`` would give after ``after``,
        counted only up to ``up_to`` (the index is read no further: the count of a busy
        week costs no more than ``up_to`` entries)."""
        require_aware("since", since)
        require_aware("until", until)
        if not projects:
            return 0
        statement = _channel_statement(channel, projects, notify_projects, since, until, after)
        matching = statement.with_only_columns(audit.c.id).limit(up_to).subquery()
        async with self._begin() as conn:
            found = await conn.execute(select(func.count()).select_from(matching))
            return int(found.scalar_one())


def _channel_statement(
    channel: str,
    projects: Collection[str],
    notify_projects: Collection[str],
    since: datetime,
    until: datetime,
    after: tuple[datetime, int] | None,
) -> Select[tuple[object, ...]]:
    """The channel's events in [since, until) after ``after``, unordered and unbounded."""
    statement = (
        _notify_events(channel, projects, notify_projects, since, until)
        if notify_projects
        else _own_events(channel, projects, since, until)
    ).where(not_(_TOLD_ONE_PERSON))
    if after is not None:
        at, entry_id = after
        statement = statement.where(
            or_(audit.c.at > at, and_(audit.c.at == at, audit.c.id > entry_id))
        )
    return statement


def _notify_events(
    channel: str,
    projects: Collection[str],
    notify_projects: Collection[str],
    since: datetime,
    until: datetime,
) -> Select[tuple[object, ...]]:
    """Where requests are mirrored: the projects' trail in time (the (project, at, id)
    index), the requests made here or of a project that notifies here, and the watch
    posts of those projects."""
    requests = and_(
        audit.c.event.in_(sorted(REQUEST_EVENTS)),
        or_(
            change_requests.c.channel == channel,
            audit.c.project.in_(sorted(notify_projects)),
        ),
    )
    watched = and_(
        audit.c.request_id.is_(None),
        audit.c.event.in_(sorted(WATCH_EVENTS)),
        audit.c.project.in_(sorted(notify_projects)),
    )
    return (
        select(audit, change_requests.c.cluster_name, change_requests.c.action)
        .select_from(audit.outerjoin(change_requests, change_requests.c.id == audit.c.request_id))
        .where(
            audit.c.at >= since,
            audit.c.at < until,
            audit.c.project.in_(sorted(projects)),
            or_(and_(audit.c.request_id.is_not(None), requests), watched),
        )
    )


def _own_events(
    channel: str, projects: Collection[str], since: datetime, until: datetime
) -> Select[tuple[object, ...]]:
    """The events of the requests made in ``channel`` (none is mirrored there): read from
    those requests (ix_gpuops_change_requests_channel, then each one's entries), so the
    cost follows the channel's own requests, not the projects' whole trail. A page is
    sorted by time: the channel's events, not the trail, are what is sorted."""
    return (
        select(audit, change_requests.c.cluster_name, change_requests.c.action)
        .select_from(change_requests.join(audit, audit.c.request_id == change_requests.c.id))
        .where(
            change_requests.c.channel == channel,
            change_requests.c.project.in_(sorted(projects)),
            audit.c.event.in_(sorted(REQUEST_EVENTS)),
            audit.c.at >= since,
            audit.c.at < until,
        )
    )


def _event(row: dict[str, object]) -> ChannelEvent:
    cluster_name, action = row.pop("cluster_name"), row.pop("action")
    return ChannelEvent(
        AuditEntry.model_validate(row),
        cluster_name=None if cluster_name is None else str(cluster_name),
        action=None if action is None else str(action),
    )
