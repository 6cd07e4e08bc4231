"""Who may do what: a user's role for a project in a channel, from the policy's grants
(users and Slack user groups, optionally limited to channels); deny by default. Within
``one_authorization()`` (the handling of one request) a permission granted once is not
decided again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Protocol

from bot.core.policy import Grant, Policy, PolicyHolder, Role

logger = logging.getLogger(__name__)


class UserGroupResolver(Protocol):
    async def members(self, usergroup_id: str) -> frozenset[str]: ...

    def cached(self, usergroup_id: str) -> frozenset[str] | None:
        """The members if known without a look-up (fresh in a cache), else None."""
        ...


@dataclass(frozen=True)
class AccessDecision:
    allowed: bool
    role: Role | None
    reason: str


_Permission = tuple[str, str, str | None, Role]  # user, project, channel, role needed
_GRANTED: ContextVar[dict[_Permission, AccessDecision] | None] = ContextVar(
    "gpuops_granted", default=None
)


@contextmanager
def one_authorization() -> Iterator[None]:
    """The handling of one request: ``Authorizer.check`` decides each permission once in it
    (a command's check and the same check where the change is opened). Tasks started in
    it see the decisions only until it ends, then decide again."""
    granted: dict[_Permission, AccessDecision] = {}
    token = _GRANTED.set(granted)
    try:
        yield
    finally:
        granted.clear()
        _GRANTED.reset(token)


def _channel_list(channels: Iterable[str]) -> str:
    return ", ".join(f"<#{c}>" for c in sorted(set(channels)))


def _only_elsewhere(grants: list[Grant], project: str, needed: Role, action: str) -> str:
    """Why a user whose grants on ``project`` all hold in other channels is refused: where
    to go when the role they need holds there, else that they lack the role."""
    able = [c for g in grants if g.role >= needed for c in g.channels or ()]
    if able:
        return f"your grant on {project} holds only in {_channel_list(able)} — ask there"
    best = max(g.role for g in grants)
    where = [c for g in grants if g.role == best for c in g.channels or ()]
    return (
        f"you are {best} on {project} (in {_channel_list(where)}); {action} needs {needed}, "
        "which you hold in no channel — a gpuops admin can grant it in the policy"
    )


class Authorizer:
    """Answers "what may this user do on this project, here?" from the policy."""

    def __init__(self, holder: PolicyHolder, groups: UserGroupResolver) -> None:
        self.holder = holder
        self.groups = groups

    @property
    def policy(self) -> Policy:
        """The policy in force (read from the holder at each use: a reload swaps it)."""
        return self.holder.current

    async def role_for(self, user: str, project: str, channel: str | None) -> Role | None:
        grants = await self._grants_of(user, project)
        return max((g.role for g in grants if g.holds_in(channel)), default=None)

    async def check(
        self,
        user: str,
        project: str,
        channel: str | None,
        needed: Role,
        *,
        action: str = "this",
    ) -> AccessDecision:
        """Decide and say why. ``action`` words the refusal: "approving needs approver"."""
        granted = _GRANTED.get()
        permission = (user, project, channel, needed)
        if granted is not None and permission in granted:
            return granted[permission]
        decision = await self._decide(user, project, channel, needed, action)
        if granted is not None and decision.allowed:
            granted[permission] = decision
        return decision

    async def _decide(
        self, user: str, project: str, channel: str | None, needed: Role, action: str
    ) -> AccessDecision:
        grants = await self._grants_of(user, project)
        if not grants:
            return AccessDecision(False, None, f"no such project or no access: {project}")
        here = [g for g in grants if g.holds_in(channel)]
        role = max((g.role for g in here), default=None)
        if role is None:
            return AccessDecision(False, None, _only_elsewhere(grants, project, needed, action))
        if role < needed:
            reason = f"you are {role} on {project}; {action} needs {needed}"
            elsewhere = [
                c
                for g in grants
                if g.role >= needed and not g.holds_in(channel)
                for c in g.channels or ()
            ]
            if elsewhere:
                reason += f" (your {needed} grant holds in {_channel_list(elsewhere)} — ask there)"
            return AccessDecision(False, role, reason)
        return AccessDecision(True, role, f"you are {role} on {project}")

    async def channels_granted(self, user: str) -> list[str]:
        """The channels where the user's channel-scoped grants hold (to say where they
        can act when they cannot here)."""
        return sorted({c for g in await self._grants_of(user) for c in g.channels or ()})

    async def projects_for(
        self, user: str, channel: str | None, min_role: Role = Role.viewer
    ) -> list[str]:
        grants = [g for g in await self._grants_of(user) if g.holds_in(channel)]
        return sorted(
            project
            for project in self.policy.projects
            if max((g.role for g in grants if g.covers(project)), default=0) >= min_role
        )

    async def projects_granted(
        self, user: str, min_role: Role = Role.viewer, *, anywhere: bool = False
    ) -> list[str]:
        """Projects where the user holds ``min_role`` for places that have no channel, such
        as the Home tab: only grants that hold in every channel count (deny by default).
        With ``anywhere``, a grant scoped to some channels counts too (a candidate to check
        in a channel)."""
        grants = [g for g in await self._grants_of(user) if anywhere or g.channels is None]
        return sorted(
            project
            for project in self.policy.projects
            if max((g.role for g in grants if g.covers(project)), default=0) >= min_role
        )

    def cluster_allowed(self, project: str, cluster_id: str) -> bool:
        config = self.policy.projects.get(project)
        if config is None:
            return False
        return any(fnmatchcase(cluster_id, pattern) for pattern in config.clusters)

    async def _grants_of(self, user: str, project: str | None = None) -> list[Grant]:
        """The grants whose principals include the user (for one project, if given)."""
        if project is not None and project not in self.policy.projects:
            return []
        candidates = [g for g in self.policy.grants if project is None or g.covers(project)]
        group_ids = sorted({gid for g in candidates if user not in g.users for gid in g.usergroups})
        members = await self._memberships(group_ids)
        return [
            g
            for g in candidates
            if user in g.users or any(user in members.get(gid, ()) for gid in g.usergroups)
        ]

    async def in_any_group(self, user: str, usergroups: Iterable[str]) -> bool:
        """Whether the user is a member of one of these user groups (a group that cannot be
        read counts as empty: deny)."""
        members = await self._memberships(sorted(set(usergroups)))
        return any(user in found for found in members.values())

    async def _memberships(self, group_ids: list[str]) -> dict[str, frozenset[str]]:
        """Members of each group: cached ones at once (no task), the rest looked up together."""
        members: dict[str, frozenset[str]] = {}
        missing: list[str] = []
        for gid in group_ids:
            known = self.groups.cached(gid)
            if known is None:
                missing.append(gid)
            else:
                members[gid] = known
        if len(missing) == 1:
            members[missing[0]] = await self._members(missing[0])
        elif missing:
            found = await asyncio.gather(*(self._members(gid) for gid in missing))
            members.update(zip(missing, found, strict=True))
        return members

    async def _members(self, usergroup_id: str) -> frozenset[str]:
        try:
            return await self.groups.members(usergroup_id)
        except Exception as exc:  # a broken lookup must deny, never crash the caller
            logger.warning(
                "user group %s could not be resolved (%s); it grants nothing",
                usergroup_id,
                type(exc).__name__,
            )
            return frozenset()
