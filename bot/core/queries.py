"""Read-only commands as data: help, the cluster list, one cluster, the audit trail.

Surfaces render the answers; nothing here changes a cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

from bot.core.access import Access, Refusal
from bot.core.answers import (
    AuditListing,
    ClusterCard,
    ClusterListing,
    HelpCard,
    PolicyCard,
    Reply,
    notice,
)
from bot.core.ask.grammar import DEFAULT_AUDIT_LIMIT, MAX_AUDIT_LIMIT
from bot.core.guardrails.describe import describe_project
from bot.core.paging import (
    AUDIT_COUNT_BOUND,
    AUDIT_PAGE_SIZE,
    LIST_PAGE_SIZE,
    Page,
    counted_range,
    page_of,
)
from bot.core.policy import Role
from bot.core.registry import MissingCredential
from bot.pacing import waiting_elsewhere
from bot.providers.base import ClusterState, ClusterSummary
from bot.providers.errors import ProviderError

NO_ACCESS = (
    "gpuops: you have no access to any project in this channel. Ask a gpuops admin "
    "for a grant (the policy file maps Slack users and groups to projects)."
)


class Queries:
    """Answers help, list, show and audit for a person in a channel."""

    def __init__(self, access: Access) -> None:
        self.access = access
        self.authorizer = access.authorizer

    async def help(self, user: str, channel: str) -> Reply:
        roles: dict[str, Role] = {}
        for project in await self.authorizer.projects_for(user, channel):
            role = await self.authorizer.role_for(user, project, channel)
            if role is not None:
                roles[project] = role
        if not roles:
            return notice(await self._no_access_here(user))
        return Reply(HelpCard(roles, tuple(self.access.catalog.provider_changes().values())))

    async def _no_access_here(self, user: str) -> str:
        """No access here: where the person's grants do hold, or how to get one."""
        channels = await self.authorizer.channels_granted(user)
        if not channels:
            return NO_ACCESS
        where = ", ".join(f"<#{c}>" for c in channels)
        return (
            f"gpuops: you have no access to any project in this channel; your grants hold "
            f"in {where} — run `/gpu help` there to see what you can do."
        )

    async def policy(self, user: str, channel: str, project: str | None, now: datetime) -> Reply:
        """The guardrails of each project the person may see here (or of one)."""
        if project is not None:
            await self.access.require(user, project, channel, Role.viewer)
            projects = [project]
        else:
            projects = await self.authorizer.projects_for(user, channel)
        described: dict[str, list[str]] = {}
        for name in projects:
            role = await self.authorizer.role_for(user, name, channel)
            if role is not None:
                described[name] = describe_project(self.access.policy, name, role, now)
        if not described:
            return notice(await self._no_access_here(user))
        return Reply(PolicyCard(described))

    async def list_clusters(
        self, user: str, channel: str, project: str | None, page: int = 1
    ) -> Reply:
        if project is not None:
            await self.access.require(user, project, channel, Role.viewer)
            projects = [project]
        else:
            projects = await self.authorizer.projects_for(user, channel)
            if not projects:
                channels = await self.authorizer.channels_granted(user)
                listed = ", ".join(f"<#{c}>" for c in channels)
                elsewhere = f" (your grants hold in {listed})" if channels else ""
                raise Refusal(
                    f"you have no projects you can view in this channel{elsewhere}.",
                    kind="not_authorized",
                )
        async with waiting_elsewhere():  # the fetches wait in child tasks: free the turn
            found = await asyncio.gather(*(self._list_one(p) for p in projects))
        results = [result for result, _ in found]
        ages = [age for _, age in found if age is not None]
        rows = [
            (name, item)
            for name, result in zip(projects, results, strict=True)
            for item in (result if isinstance(result, list) and result else [result])
        ]
        shown, count, on_page = page_of(rows, page, LIST_PAGE_SIZE)
        flags = [isinstance(item, ClusterSummary) for _, item in rows]
        first, last, total = counted_range(flags, shown, LIST_PAGE_SIZE)
        where = Page(
            number=shown,
            count=count,
            first=first,
            last=last,
            total=total,
            noun="clusters",
            command="/gpu list" + (f" {project}" if project else ""),
            asked=page if page > count else None,
        )
        as_of = max(ages) if ages else None
        return Reply(ClusterListing(_groups(on_page), where, as_of_seconds=as_of))

    async def _list_one(self, project: str) -> tuple[list[ClusterSummary] | str, float | None]:
        """The project's clusters from its fleet snapshot (and the snapshot's age), or the
        text of why they could not be listed."""
        try:
            view = await self.access.fleet.get(project)
        except ProviderError as exc:
            return exc.user_message, None
        except MissingCredential as exc:
            return str(exc), None
        allowed = self.authorizer.cluster_allowed
        return [c for c in view.clusters if allowed(project, c.cluster_id)], self.access.fleet.age(
            view
        )

    async def cluster(self, user: str, channel: str, project: str, cluster_id: str) -> ClusterState:
        """A cluster the person may view, fetched now."""
        await self.access.require(user, project, channel, Role.viewer)
        self.access.require_cluster_allowed(project, cluster_id)
        return await self.access.fetch(project, cluster_id)

    async def show(self, user: str, channel: str, project: str, cluster_id: str) -> Reply:
        state = await self.cluster(user, channel, project, cluster_id)
        return Reply(ClusterCard(state.summary, shown_by=user), public=True)

    async def audit(
        self, user: str, channel: str, project: str | None, limit: int, page: int = 1
    ) -> Reply:
        store = self.access.store
        if project is not None:
            await self.access.require(user, project, channel, Role.admin)
            entries = await store.list_audit(project=project, limit=limit)
            projects = [project]
        else:
            projects = await self.authorizer.projects_for(user, channel, Role.admin)
            if not projects:
                raise Refusal(
                    "reading the audit trail needs the admin role.", kind="not_authorized"
                )
            batches = [await store.list_audit(project=p, limit=limit) for p in projects]
            merged = (e for b in batches for e in b)
            entries = sorted(merged, key=lambda e: (e.at, e.id), reverse=True)[:limit]
        # Counted up to a bound: a year's trail is not read to say how long it is.
        counts = [await store.count_audit(project=p, up_to=AUDIT_COUNT_BOUND + 1) for p in projects]
        bounded = sum(counts) > AUDIT_COUNT_BOUND
        available = min(sum(counts), AUDIT_COUNT_BOUND)
        shown, count, on_page = page_of(entries, page, AUDIT_PAGE_SIZE)
        first = (shown - 1) * AUDIT_PAGE_SIZE + 1 if on_page else 0
        command = "/gpu audit" + (f" {project}" if project else "")
        wider = min(available, MAX_AUDIT_LIMIT)
        where = Page(
            number=shown,
            count=count,
            first=first,
            last=first + len(on_page) - 1 if on_page else 0,
            total=len(entries),
            noun="entries",
            command=command + (f" {limit}" if limit != DEFAULT_AUDIT_LIMIT else ""),
            asked=page if page > count else None,
            available=available,
            available_bounded=bounded,
            more_command=f"{command} {wider}" if wider > len(entries) else None,
        )
        return Reply(AuditListing(on_page, where))


def _groups(
    rows: Sequence[tuple[str, ClusterSummary | list[ClusterSummary] | str]],
) -> dict[str, list[ClusterSummary] | str]:
    """A page's rows by project: its clusters on this page, an error text, or [] for none."""
    groups: dict[str, list[ClusterSummary] | str] = {}
    for project, item in rows:
        if isinstance(item, ClusterSummary):
            listed = groups.setdefault(project, [])
            if isinstance(listed, list):
                listed.append(item)
        else:
            groups[project] = item if isinstance(item, str) else []
    return groups
