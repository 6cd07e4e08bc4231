"""What happened in one channel, read from the audit trail a page at a time (SPEC §10): the
events of the requests made there (or mirrored there: their project's notify channel), and
the watcher's posts for the projects that notify there."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, or_, select

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
        if not notify_projects:  # only the requests made here: start from them
            return await self._own_events(channel, projects, since, until, after, limit)
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
        statement = (
            select(audit, change_requests.c.cluster_name, change_requests.c.action)
            .select_from(
                audit.outerjoin(change_requests, change_requests.c.id == audit.c.request_id)
            )
            .where(
                audit.c.at >= since,
                audit.c.at < until,
                audit.c.project.in_(sorted(projects)),
                or_(and_(audit.c.request_id.is_not(None), requests), watched),
            )
            .order_by(audit.c.at, audit.c.id)
            .limit(limit)
        )
        return await self._events(statement, after)

    async def _own_events(
        self,
        channel: str,
        projects: Collection[str],
        since: datetime,
        until: datetime,
        after: tuple[datetime, int] | None,
        limit: int,
    ) -> list[ChannelEvent]:
        """The events of the requests made in ``channel`` (none is mirrored there): read
        from those requests (ix_gpuops_change_requests_channel, then each one's entries),
        so the cost follows the channel's own requests, not the projects' whole trail. The
        page is sorted by time: the channel's events, not the trail, are what is sorted."""
        statement = (
            select(audit, change_requests.c.cluster_name, change_requests.c.action)
            .select_from(change_requests.join(audit, audit.c.request_id == change_requests.c.id))
            .where(
                change_requests.c.channel == channel,
                change_requests.c.project.in_(sorted(projects)),
                audit.c.event.in_(sorted(REQUEST_EVENTS)),
                audit.c.at >= since,
                audit.c.at < until,
            )
            .order_by(audit.c.at, audit.c.id)
            .limit(limit)
        )
        return await self._events(statement, after)

    async def _events(
        self, statement: Select[Any], after: tuple[datetime, int] | None
    ) -> list[ChannelEvent]:
        if after is not None:
            at, entry_id = after
            statement = statement.where(
                or_(audit.c.at > at, and_(audit.c.at == at, audit.c.id > entry_id))
            )
        async with self._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [_event(dict(row)) for row in rows]


def _event(row: dict[str, object]) -> ChannelEvent:
    cluster_name, action = row.pop("cluster_name"), row.pop("action")
    return ChannelEvent(
        AuditEntry.model_validate(row),
        cluster_name=None if cluster_name is None else str(cluster_name),
        action=None if action is None else str(action),
    )
