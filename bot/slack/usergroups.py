"""Members of Slack user groups for the core's authorizer, via ``usergroups.users.list``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

logger = logging.getLogger(__name__)


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
        self._cache: dict[str, _Members] = {}
        self._inflight: dict[str, asyncio.Task[frozenset[str]]] = {}

    def cached(self, usergroup_id: str) -> frozenset[str] | None:
        """The members while the cache holds them (or holds off retrying), else None."""
        cached = self._cache.get(usergroup_id)
        return cached.users if cached is not None and self._fresh(cached) else None

    async def members(self, usergroup_id: str) -> frozenset[str]:
        known = self.cached(usergroup_id)
        if known is not None:
            return known
        task = self._inflight.get(usergroup_id)
        if task is None:
            task = asyncio.create_task(self._fetch(usergroup_id))
            self._inflight[usergroup_id] = task
        # Shielded: one waiter being cancelled must not cancel the lookup the others share.
        return await asyncio.shield(task)

    def invalidate(self, usergroup_id: str | None = None) -> None:
        """Forget cached members (of one group, or all), e.g. on ``subteam_members_changed``."""
        if usergroup_id is None:
            self._cache.clear()
        else:
            self._cache.pop(usergroup_id, None)

    def _fresh(self, cached: _Members) -> bool:
        now = self._clock()
        if (
            cached.failed_at is not None
            and now - cached.failed_at < self.retry_after_failure_seconds
        ):
            return True
        return cached.fetched_at is not None and now - cached.fetched_at < self.ttl_seconds

    async def _fetch(self, usergroup_id: str) -> frozenset[str]:
        try:
            response = await self.client.usergroups_users_list(usergroup=usergroup_id)
            users = response.get("users")
            if not isinstance(users, list):
                raise TypeError("usergroups.users.list answered without a users list")
            members = frozenset(str(u) for u in users)
            self._cache[usergroup_id] = _Members(members, fetched_at=self._clock())
            return members
        except Exception as exc:  # Slack down or refusing: fall back, never raise
            return self._fallback(usergroup_id, exc)
        finally:
            self._inflight.pop(usergroup_id, None)

    def _fallback(self, usergroup_id: str, exc: Exception) -> frozenset[str]:
        error = exc.response.get("error") if isinstance(exc, SlackApiError) else None
        cached = self._cache.get(usergroup_id)
        logger.warning(
            "usergroups.users.list failed for %s (%s); using %s",
            usergroup_id,
            error or type(exc).__name__,
            "the last known members" if cached else "no members",
        )
        if cached is None:
            cached = _Members(frozenset())
            self._cache[usergroup_id] = cached
        cached.failed_at = self._clock()
        return cached.users
