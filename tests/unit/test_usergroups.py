"""The Slack user-group resolver against a local fake of Slack's Web API: caching, sharing
one look-up, falling back when Slack fails."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from bot.core.authorizer import Authorizer, one_authorization
from bot.core.policy import Policy, PolicyHolder, Role
from bot.local.slack import FakeSlack as StandIn
from bot.slack.usergroups import REQUEST_TEAM, SlackUserGroupResolver
from tests.support.catalog import load_policy
from tests.unit.test_policy import POLICY


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    path = tmp_path / "policy.yml"
    path.write_text(POLICY)
    return load_policy(path)


@dataclass
class FakeSlack:
    groups: dict[str, list[str]] = field(default_factory=lambda: {"S0PLATFORM": ["U1", "U2"]})
    calls: list[str] = field(default_factory=list)
    failure: str | None = None  # "ok_false" or "http_500"
    gate: asyncio.Event | None = None

    async def handle(self, request: web.Request) -> web.Response:
        form = await request.post() if request.method == "POST" else request.query
        group = str(form.get("usergroup", ""))
        self.calls.append(group)
        if self.gate is not None:
            await self.gate.wait()
        if self.failure == "http_500":
            return web.json_response({"ok": False, "error": "internal_error"}, status=500)
        if self.failure == "ok_false" or group not in self.groups:
            return web.json_response({"ok": False, "error": "no_such_subteam"})
        return web.json_response({"ok": True, "users": self.groups[group]})


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def slack() -> AsyncIterator[tuple[FakeSlack, AsyncWebClient]]:
    fake = FakeSlack()
    app = web.Application()
    app.router.add_route("*", "/api/usergroups.users.list", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = AsyncWebClient(token="xoxb-test-token", base_url=f"http://127.0.0.1:{port}/api/")
    try:
        yield fake, client
    finally:
        await runner.cleanup()


async def test_resolver_caches_until_ttl(slack: tuple[FakeSlack, AsyncWebClient]) -> None:
    fake, client = slack
    clock = Clock()
    resolver = SlackUserGroupResolver(client, ttl_seconds=60, clock=clock)
    assert await resolver.members("S0PLATFORM") == {"U1", "U2"}
    clock.now += 59
    fake.groups["S0PLATFORM"] = ["U3"]
    assert await resolver.members("S0PLATFORM") == {"U1", "U2"}
    assert fake.calls == ["S0PLATFORM"]
    clock.now += 2
    assert await resolver.members("S0PLATFORM") == {"U3"}
    assert fake.calls == ["S0PLATFORM", "S0PLATFORM"]
    resolver.invalidate("S0PLATFORM")
    await resolver.members("S0PLATFORM")
    assert len(fake.calls) == 3


async def test_resolver_collapses_concurrent_lookups(
    slack: tuple[FakeSlack, AsyncWebClient],
) -> None:
    fake, client = slack
    fake.gate = asyncio.Event()
    resolver = SlackUserGroupResolver(client, ttl_seconds=60)
    lookups = [asyncio.create_task(resolver.members("S0PLATFORM")) for _ in range(5)]
    while not fake.calls:
        await asyncio.sleep(0.01)
    fake.gate.set()
    results = await asyncio.gather(*lookups)
    assert all(r == {"U1", "U2"} for r in results)
    assert fake.calls == ["S0PLATFORM"]


async def test_a_cancelled_waiter_does_not_cancel_the_shared_lookup(
    slack: tuple[FakeSlack, AsyncWebClient],
) -> None:
    fake, client = slack
    fake.gate = asyncio.Event()
    resolver = SlackUserGroupResolver(client, ttl_seconds=60)
    first = asyncio.create_task(resolver.members("S0PLATFORM"))
    second = asyncio.create_task(resolver.members("S0PLATFORM"))
    while not fake.calls:
        await asyncio.sleep(0.01)
    first.cancel()
    fake.gate.set()
    assert await second == {"U1", "U2"}
    assert fake.calls == ["S0PLATFORM"]


@pytest.mark.parametrize("failure", ["ok_false", "http_500"])
async def test_resolver_falls_back_to_last_known_members(
    slack: tuple[FakeSlack, AsyncWebClient], failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake, client = slack
    clock = Clock()
    resolver = SlackUserGroupResolver(
        client, ttl_seconds=60, retry_after_failure_seconds=10, clock=clock
    )
    assert await resolver.members("S0PLATFORM") == {"U1", "U2"}
    fake.failure = failure
    clock.now += 61
    with caplog.at_level(logging.WARNING, logger="bot.slack.usergroups"):
        assert await resolver.members("S0PLATFORM") == {"U1", "U2"}
    assert "usergroups.users.list failed for S0PLATFORM" in caplog.text
    assert "the last known members" in caplog.text
    assert "xoxb-test-token" not in caplog.text
    calls = len(fake.calls)
    clock.now += 5  # within the pause after a failure: no new call
    assert await resolver.members("S0PLATFORM") == {"U1", "U2"}
    assert len(fake.calls) == calls
    fake.failure = None
    fake.groups["S0PLATFORM"] = ["U9"]
    clock.now += 6
    assert await resolver.members("S0PLATFORM") == {"U9"}


async def test_resolver_failure_without_history_gives_nobody(
    slack: tuple[FakeSlack, AsyncWebClient], caplog: pytest.LogCaptureFixture
) -> None:
    _, client = slack
    resolver = SlackUserGroupResolver(client)
    with caplog.at_level(logging.WARNING, logger="bot.slack.usergroups"):
        assert await resolver.members("S0UNKNOWN") == frozenset()
    assert "no_such_subteam" in caplog.text
    assert "no members" in caplog.text


async def test_authorizer_with_slack_groups(
    slack: tuple[FakeSlack, AsyncWebClient], policy: Policy
) -> None:
    fake, client = slack
    fake.groups["S0PLATFORM"] = ["U03CAROL"]
    auth = Authorizer(PolicyHolder(policy), SlackUserGroupResolver(client))
    assert await auth.role_for("U03CAROL", "e2e-delhi", None) is Role.viewer
    assert await auth.role_for("U04DAVE", "together-dev", None) is None  # S0BROKEN unknown to Slack


T = TypeVar("T")


class TaskCount:
    """Counts the tasks the running loop creates while installed as its task factory."""

    def __init__(self) -> None:
        self.created = 0

    def __call__(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Generator[Any, None, T] | Coroutine[Any, Any, T],
        /,
    ) -> asyncio.Future[T]:
        self.created += 1
        return asyncio.Task(coro, loop=loop)


async def test_a_cached_group_is_read_without_a_task(
    slack: tuple[FakeSlack, AsyncWebClient], policy: Policy
) -> None:
    fake, client = slack
    fake.groups["S0PLATFORM"] = ["U03CAROL"]
    resolver = SlackUserGroupResolver(client)
    auth = Authorizer(PolicyHolder(policy), resolver)
    assert await auth.role_for("U03CAROL", "e2e-delhi", None) is Role.viewer  # fills the cache
    assert resolver.cached("S0PLATFORM") == frozenset({"U03CAROL"})
    loop = asyncio.get_running_loop()
    tasks = TaskCount()
    loop.set_task_factory(tasks)
    try:
        decision = await auth.check("U03CAROL", "e2e-delhi", None, Role.viewer)
        assert await auth.in_any_group("U03CAROL", ["S0PLATFORM"])
    finally:
        loop.set_task_factory(None)
    assert decision.allowed
    assert tasks.created == 0
    assert fake.calls == ["S0PLATFORM"]


async def test_one_authorization_decides_a_permission_once(
    slack: tuple[FakeSlack, AsyncWebClient], policy: Policy
) -> None:
    fake, client = slack
    fake.groups["S0PLATFORM"] = ["U03CAROL"]
    resolver = SlackUserGroupResolver(client, ttl_seconds=0)  # every decision looks it up
    auth = Authorizer(PolicyHolder(policy), resolver)
    with one_authorization():
        for _ in range(3):
            assert (await auth.check("U03CAROL", "e2e-delhi", None, Role.viewer)).allowed
        refused = [await auth.check("U03CAROL", "e2e-delhi", None, Role.operator) for _ in "ab"]
    assert fake.calls == ["S0PLATFORM"] * 3  # one grant, decided once; refusals each time
    assert not any(decision.allowed for decision in refused)
    assert (await auth.check("U03CAROL", "e2e-delhi", None, Role.viewer)).allowed
    assert len(fake.calls) == 4  # outside the block: decided again


async def test_an_org_token_lookup_names_the_requests_team_else_the_installations() -> None:
    """Under an org-wide install Slack refuses a lookup without ``team_id``: the team of the
    request being answered is sent, else the one auth.test named, and each is cached apart."""
    slack = StandIn("xoxb-org", usergroups={"S0PLATFORM": ["U1"]})
    slack.org_install = True
    api_url = await slack.start()
    try:
        resolver = SlackUserGroupResolver(AsyncWebClient(token="xoxb-org", base_url=api_url))
        assert await resolver.members("S0PLATFORM") == frozenset()  # no team: refused
        resolver.installation_team = "T0INSTALL"
        assert await resolver.members("S0PLATFORM") == {"U1"}
        token = REQUEST_TEAM.set("T0CLICKED")
        try:
            assert await resolver.members("S0PLATFORM") == {"U1"}
        finally:
            REQUEST_TEAM.reset(token)
        sent = [(c.args.get("team_id"), c.error) for c in slack.calls_to("usergroups.users.list")]
        assert sent == [(None, "missing_argument"), ("T0INSTALL", None), ("T0CLICKED", None)]
    finally:
        await slack.stop()
