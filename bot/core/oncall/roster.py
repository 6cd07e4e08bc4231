"""Who is on call now on a policy's schedule (SPEC §16), as Slack users: the on-call
tool's answer, cached at most ``cache_seconds`` (60 by default), each person mapped to a
Slack user by the policy's ``people`` table or, when ``match_by_email`` allows it, by their
e-mail address (``users.lookupByEmail``, behind the EmailDirectory port). A person with no
mapping is kept, named, with no Slack id: never silently dropped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from bot.config import Settings
from bot.core.policy import PolicyHolder
from bot.core.policy.oncall import OnCallConfig, OnCallSource, OnCallSourceName
from bot.errors import GpuopsError
from bot.providers.oncall import (
    DEFAULT_DEADLINE,
    OnCallClient,
    OnCallPerson,
    OnCallUnavailable,
    OpsgenieClient,
    PagerDutyClient,
)

Mapping_ = Literal["people", "email", "unmapped"]
EMAIL_CACHE_SECONDS = 3600.0


class EmailDirectory(Protocol):
    """Slack users by e-mail address (``users.lookupByEmail``)."""

    async def user_by_email(self, email: str) -> str | None:
        """The Slack user id with that address, None when Slack knows none; raises
        DirectoryError when Slack could not be asked."""
        ...


class DirectoryError(GpuopsError):
    """Slack's user directory could not answer (a missing scope, a fault)."""


@dataclass(frozen=True)
class OnCallMember:
    """One person on call now on ``schedule``, with their Slack user when mapped."""

    schedule: str
    person: OnCallPerson
    slack_id: str | None
    mapping: Mapping_

    @property
    def level(self) -> int:
        return self.person.level


class OnCallClients:
    """One client per on-call tool (its token read from the environment by the policy's
    ``token_env``), rebuilt when the policy changes the tool's URL or variable."""

    def __init__(
        self,
        credential: Callable[[str], str | None],
        base_urls: Mapping[str, str] | None = None,
        *,
        deadline: float = DEFAULT_DEADLINE,
    ) -> None:
        self.credential = credential
        self.base_urls = dict(base_urls or {})
        self.deadline = deadline
        self._clients: dict[tuple[str, str, str | None], OnCallClient] = {}

    @classmethod
    def of(cls, settings: Settings, environment: Mapping[str, str]) -> OnCallClients:
        """The clients the settings say (deadline, test URLs), tokens from ``environment``."""
        return cls(
            environment.get,
            settings.gpuops_oncall_base_urls,
            deadline=settings.gpuops_oncall_deadline,
        )

    def client(
        self, source: OnCallSourceName, config: OnCallSource, schedule_id: str
    ) -> OnCallClient:
        base = self.base_urls.get(source) or config.base_url
        key = (source, config.token_env, base)
        held = self._clients.get(key)
        if held is not None:
            return held
        token = self.credential(config.token_env)
        if not token:
            raise OnCallUnavailable(
                source, schedule_id, "refused", f"{config.token_env} is not set (the token)"
            )
        kind = PagerDutyClient if source == "pagerduty" else OpsgenieClient
        made = (
            kind(token, base, deadline=self.deadline)
            if base
            else kind(token, deadline=self.deadline)
        )
        self._clients[key] = made
        return made

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


class OnCallRoster:
    """Who is on call now on each schedule of the policy in force, cached per schedule."""

    def __init__(
        self,
        holder: PolicyHolder,
        clients: OnCallClients,
        directory: EmailDirectory | None = None,
        *,
        cache_seconds: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.holder = holder
        self.clients = clients
        self.directory = directory
        self.cache_seconds = min(cache_seconds, 60.0)  # SPEC §16: at most 60 s
        self.monotonic = monotonic
        self._cache: dict[tuple[str, str, str], tuple[float, tuple[OnCallMember, ...]]] = {}
        self._emails: dict[str, tuple[float, str | None]] = {}
        self._locks: dict[tuple[str, str, str], asyncio.Lock] = {}

    @property
    def config(self) -> OnCallConfig | None:
        return self.holder.current.oncall

    async def on_call(self, schedule: str) -> tuple[OnCallMember, ...]:
        """Everyone on call now on the named schedule, lowest level first; raises
        OnCallUnavailable when the tool gives no usable answer (nothing is cached then)."""
        config = self.config
        found = config.schedule(schedule) if config is not None else None
        if config is None or found is None:
            raise KeyError(f"no on-call schedule '{schedule}' in the policy")
        source, schedule_id = found
        key = (schedule, source, schedule_id)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:  # one read per schedule at a time: the others take its answer
            held = self._cache.get(key)
            if held is not None and held[0] > self.monotonic():
                return held[1]
            tool = config.source(source)
            assert tool is not None
            people = await self.clients.client(source, tool, schedule_id).on_call(schedule_id)
            members = tuple([await self._member(config, schedule, p) for p in people])
            self._cache[key] = (self.monotonic() + self.cache_seconds, members)
            return members

    def forget(self) -> None:
        """Drop every cached answer (a test moving the tools' clock, a reload)."""
        self._cache.clear()

    async def _member(
        self, config: OnCallConfig, schedule: str, person: OnCallPerson
    ) -> OnCallMember:
        mapped = config.people.get(person.user_id)
        if mapped is not None:
            return OnCallMember(schedule, person, mapped, "people")
        if config.match_by_email and person.email and self.directory is not None:
            slack_id = await self._by_email(person.email)
            if slack_id is not None:
                return OnCallMember(schedule, person, slack_id, "email")
        return OnCallMember(schedule, person, None, "unmapped")

    async def _by_email(self, email: str) -> str | None:
        held = self._emails.get(email.lower())
        if held is not None and held[0] > self.monotonic():
            return held[1]
        assert self.directory is not None
        try:
            found = await self.directory.user_by_email(email)
        except DirectoryError:
            return None  # unmapped this time; asked again at the next read
        self._emails[email.lower()] = (self.monotonic() + EMAIL_CACHE_SECONDS, found)
        return found
