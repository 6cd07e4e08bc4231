"""Members of Slack user groups for the core's authorizer, via ``usergroups.users.list``.

Under an org-wide install (which a Workflow step needs) the bot token is an org-level one,
and Slack requires ``team_id`` — the workspace the group belongs to — with it: the team of
the Slack request being answered (``REQUEST_TEAM``, set by the ``RememberTeam``
middleware), else the installation's own (from ``auth.test``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

logger = logging.getLogger(__name__)

REQUEST_TEAM: ContextVar[str | None] = ContextVar("gpuops_request_team", default=None)
"""The Slack team (workspace) of the request whose listener is running, if any."""


_GroupKey = tuple[str | None, str]  # (team, user group)


@dataclass
class _Members:
    users: frozenset[str]
    fetched_at: float | None = None
    failed_at: float | None = None


class SlackUserGroupResolver:
    """Members of Slack user groups via ``usergroups.users.list``, cached for
    ``ttl_seconds``. Concurrent lookups of one group share one API call. When Slack fails,
    the last known members stand (or nobody, if never fetched) and the next attempt waits
    ``retry_after_failure_seconds`` so an outage does not turn every click into a call."""

    def __init__(
        self,
        client: AsyncWebClient,
        ttl_seconds: float = 300,
        *,
        retry_after_failure_seconds: float = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.ttl_seconds = ttl_seconds
        self.retry_after_failure_seconds = retry_after_failure_seconds
        self._clock = clock
        self.installation_team: str | None = None
        """The team auth.test named, for lookups outside any Slack request."""
        self._cache: dict[_GroupKey, _Members] = {}
        self._inflight: dict[_GroupKey, asyncio.Task[frozenset[str]]] = {}

    def cached(self, usergroup_id: str) -> frozenset[str] | None:
        """The members while the cache holds them (or holds off retrying), else None."""
        cached = self._cache.get(self._key(usergroup_id))
        return cached.users if cached is not None and self._fresh(cached) else None

    async def members(self, usergroup_id: str) -> frozenset[str]:
        known = self.cached(usergroup_id)
        if known is not None:
            return known
        key = self._key(usergroup_id)
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.create_task(self._fetch(key))
            self._inflight[key] = task
        # Shielded: one waiter being cancelled must not cancel the lookup the others share.
        return await asyncio.shield(task)

    def invalidate(self, usergroup_id: str | None = None) -> None:
        """Forget cached members (of one group, or all), e.g. on ``subteam_members_changed``."""
        if usergroup_id is None:
            self._cache.clear()
            return
        for key in [k for k in self._cache if k[1] == usergroup_id]:
            del self._cache[key]

    def _key(self, usergroup_id: str) -> _GroupKey:
        return (REQUEST_TEAM.get() or self.installation_team, usergroup_id)

    def _fresh(self, cached: _Members) -> bool:
        now = self._clock()
        if (
            cached.failed_at is not None
            and now - cached.failed_at < self.retry_after_failure_seconds
        ):
            return True
        return cached.fetched_at is not None and now - cached.fetched_at < self.ttl_seconds

    async def _fetch(self, key: _GroupKey) -> frozenset[str]:
        team, usergroup_id = key
        try:
            # team_id is ignored with a workspace token and required with an org token.
            response = await self.client.usergroups_users_list(usergroup=usergroup_id, team_id=team)
            users = response.get("users")
            if not isinstance(users, list):
                raise TypeError("usergroups.users.list answered without a users list")
            members = frozenset(str(u) for u in users)
            self._cache[key] = _Members(members, fetched_at=self._clock())
            return members
        except Exception as exc:  # Slack down or refusing: fall back, never raise
            return self._fallback(key, exc)
        finally:
            self._inflight.pop(key, None)

    def _fallback(self, key: _GroupKey, exc: Exception) -> frozenset[str]:
        usergroup_id = key[1]
        error = exc.response.get("error") if isinstance(exc, SlackApiError) else None
        cached = self._cache.get(key)
        logger.warning(
            "usergroups.users.list failed for %s (%s); using %s",
            usergroup_id,
            error or type(exc).__name__,
            "the last known members" if cached else "no members",
        )
        if cached is None:
            cached = _Members(frozenset())
            self._cache[key] = cached
        cached.failed_at = self._clock()
        return cached.users
