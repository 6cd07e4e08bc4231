"""The fast core harness: CommandService and ChangeWorkflow composed as bot.runtime composes
them, over scripted provider adapters (tests/support/core_fleet.py), a recording notifier
(tests/support/core_notifier.py), the real store on a temp SQLite file (or PostgreSQL) and a
clock the test moves. No HTTP, no Slack stand-in, no simulator: a test runs in milliseconds.

    async with core_harness(tmp_path) as core:
        opened = await core.open(DAVE, "e2e-delhi", "101", "restart_workers")
        assert await core.approve(BOB, opened.id) is None
        assert (await core.record(opened.id)).state is RequestState.SUCCEEDED
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bot.core.access import Access
from bot.core.answers import Notice, Reply
from bot.core.ask.change import ChangeAsk
from bot.core.authorizer import Authorizer
from bot.core.home_refresh import FanOutNotifier
from bot.core.policy import Policy, PolicyHolder
from bot.core.requests.deciders import Decision
from bot.core.requests.decisions import NeedsBreakGlass
from bot.core.requests.schedule import Schedule
from bot.core.requests.workflow import ChangeWorkflow
from bot.core.service import CommandOutcome, CommandService
from bot.core.store import ChangeRequestRecord, Store
from bot.local.demo.stack import DEMO_POLICY, USERGROUPS
from tests.support.catalog import load_policy
from tests.support.core_fleet import (
    ScriptedAdapter,
    ScriptedE2E,
    ScriptedTogether,
    e2e_seed,
    together_seed,
)
from tests.support.core_notifier import RecordingNotifier

CHANNEL = "C0INCIDENT"
NOTIFY_CHANNEL = "C0GPUAUDIT"
ALICE, BOB, CAROL, DAVE, ERIN, MALLORY = (
    "U01ALICE",
    "U02BOB",
    "U03CAROL",
    "U04DAVE",
    "U05ERIN",
    "U06MALLORY",
)
REQUEST_ID = re.compile(r"CR-[0-9A-Z]{6}")


class ManualClock:
    """The workflow's clock (expiry, schedules, freezes, follow-up): it moves when told."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


class StaticGroups:
    """Slack user groups as a fixed map (the demo's S0PLATFORM = Carol)."""

    def __init__(self, groups: Mapping[str, list[str]]) -> None:
        self.groups = {k: frozenset(v) for k, v in groups.items()}
        self.asked: list[str] = []

    async def members(self, usergroup_id: str) -> frozenset[str]:
        self.asked.append(usergroup_id)
        return self.groups.get(usergroup_id, frozenset())

    def cached(self, usergroup_id: str) -> frozenset[str] | None:
        """Known without a look-up: a fixed map is always fresh."""
        return self.groups.get(usergroup_id, frozenset())


class ScriptedProviders:
    """The adapter lookup the core is given: one scripted adapter per policy project."""

    def __init__(self, policy: Policy, clock: ManualClock) -> None:
        self.adapters: dict[str, ScriptedAdapter] = {}
        together = together_seed(clock.now)
        for name, project in policy.projects.items():
            if project.provider == "together":
                project_id = getattr(project, "project_id", None)
                self.adapters[name] = ScriptedTogether(name, project_id, together, clock)
            elif project.provider == "e2e":
                location = str(getattr(project, "location", ""))
                self.adapters[name] = ScriptedE2E(name, location, e2e_seed())

    def __call__(self, project: str) -> ScriptedAdapter:
        return self.adapters[project]


@dataclass(frozen=True)
class Opened:
    """A request as the requester was told about it."""

    id: str
    reply: Reply

    @property
    def text(self) -> str:
        return reply_text(self.reply)


def reply_text(reply: object) -> str:
    """The sentence of a Reply (a notice), for assertions."""
    assert isinstance(reply, Reply) and isinstance(reply.content, Notice), reply
    return reply.content.text


@dataclass
class Core:
    """One composed core: its parts, and the moves a person makes, as calls."""

    policy_path: Path
    store: Store
    access: Access
    workflow: ChangeWorkflow
    ops: CommandService
    notifier: RecordingNotifier
    clock: ManualClock
    providers: ScriptedProviders
    groups: StaticGroups
    instance_id: str
    settings: dict[str, Any] = field(default_factory=dict)  # the workflow's, for replicas
    extra: list[ChangeWorkflow] = field(default_factory=list)

    def provider(self, project: str) -> ScriptedAdapter:
        return self.providers(project)

    @property
    def together(self) -> ScriptedTogether:
        adapter = self.providers("together-prod")
        assert isinstance(adapter, ScriptedTogether)
        return adapter

    @property
    def e2e(self) -> ScriptedE2E:
        adapter = self.providers("e2e-delhi")
        assert isinstance(adapter, ScriptedE2E)
        return adapter

    # -- what people do ------------------------------------------------------------------
    async def command(self, user: str, text: str, channel: str = CHANNEL) -> CommandOutcome:
        """``user`` types ``/gpu text``."""
        return await self.ops.handle_command(user, channel, text)

    async def answer(self, user: str, text: str, channel: str = CHANNEL) -> str:
        """The sentence ``user`` is told for ``/gpu text``."""
        return reply_text(await self.command(user, text, channel))

    async def open(
        self,
        user: str,
        project: str,
        cluster_id: str,
        action: str,
        inputs: Mapping[str, Any] | None = None,
        *,
        reason: str | None = None,
        channel: str = CHANNEL,
        override: str | None = None,
        schedule: Schedule | None = None,
    ) -> Opened:
        """Open a change request as a form would; the id it was given and the answer."""
        reply = await self.workflow.request_change(
            ChangeAsk(
                user=user,
                channel=channel,
                project=project,
                cluster_id=cluster_id,
                action=action,
                inputs=dict(inputs or {}),
                reason=reason,
                command=f"core {action}",
                override=override,
                schedule=schedule,
            )
        )
        match = REQUEST_ID.search(reply_text(reply))
        assert match is not None, reply
        return Opened(match.group(0), reply)

    async def decide(
        self,
        user: str,
        request_id: str,
        decision: Decision,
        *,
        channel: str = CHANNEL,
        reason: str | None = None,
        break_glass_reason: str | None = None,
    ) -> Reply | NeedsBreakGlass | None:
        return await self.ops.decide(
            user=user,
            channel=channel,
            request_id=request_id,
            decision=decision,
            reason=reason,
            break_glass_reason=break_glass_reason,
        )

    async def approve(
        self, user: str, request_id: str, **kw: Any
    ) -> Reply | NeedsBreakGlass | None:
        return await self.decide(user, request_id, "approve", **kw)

    async def deny(self, user: str, request_id: str, **kw: Any) -> Reply | NeedsBreakGlass | None:
        return await self.decide(user, request_id, "deny", **kw)

    async def cancel(self, user: str, request_id: str, **kw: Any) -> Reply | NeedsBreakGlass | None:
        return await self.decide(user, request_id, "cancel", **kw)

    # -- what is known -------------------------------------------------------------------
    async def record(self, request_id: str) -> ChangeRequestRecord:
        record = await self.store.get_request(request_id)
        assert record is not None, request_id
        return record

    async def trail(self, request_id: str) -> list[tuple[str, str, str | None]]:
        """(actor, event, outcome) of a request's audit rows, oldest first."""
        rows = await self.store.list_audit(request_id=request_id, limit=100)
        return [(r.actor, r.event, r.outcome) for r in reversed(rows)]

    async def events(self, request_id: str) -> list[str]:
        return [event for _, event, _ in await self.trail(request_id)]

    def reload(self, policy_yaml: str) -> None:
        """Put a new policy in force as a SIGHUP reload does (the holder swaps it)."""
        self.policy_path.write_text(policy_yaml, encoding="utf-8")
        self.access.authorizer.holder.swap(load_policy(self.policy_path))

    async def replica(self, instance_id: str) -> ChangeWorkflow:
        """Another replica's workflow (the same settings) on the same store, providers,
        notifier and clock."""
        workflow = _workflow(
            self.access, self.notifier, instance_id, self.clock, **dict(self.settings)
        )
        self.extra.append(workflow)
        return workflow


def _workflow(
    access: Access, notifier: RecordingNotifier, instance_id: str, clock: ManualClock, **kw: Any
) -> ChangeWorkflow:
    return ChangeWorkflow(
        access=access,
        store=access.store,
        notifier=FanOutNotifier(notifier, []),
        instance_id=instance_id,
        poll_seconds=kw.pop("poll_seconds", 0.0),
        clock=clock,
        **kw,
    )


_TEMPLATE: list[Path] = []  # this process's migrated empty database
_POLICIES: dict[str, Policy] = {}  # each policy text as loaded once (a Policy is frozen)


async def _fresh_sqlite(workdir: Path) -> str:
    """A fresh SQLite store in ``workdir``: a copy of one migrated once per process (the
    migrations are most of a store's opening time)."""
    if not _TEMPLATE:
        folder = Path(tempfile.mkdtemp(prefix="gpuops-core-"))
        atexit.register(shutil.rmtree, folder, True)
        template = folder / "empty.db"
        await (await Store.open(f"sqlite:///{template}")).close()
        _TEMPLATE.append(template)
    target = workdir / "gpuops.db"
    shutil.copyfile(_TEMPLATE[0], target)
    return f"sqlite:///{target}"


@asynccontextmanager
async def core_harness(
    workdir: Path,
    *,
    policy_yaml: str = DEMO_POLICY,
    database_url: str | None = None,
    instance_id: str = "core-a",
    start: datetime | None = None,
    **workflow_settings: Any,
) -> AsyncIterator[Core]:
    """A composed core on a fresh store in ``workdir`` (or ``database_url``); the workflow
    takes bot.runtime's settings as keywords (``poll_seconds``, ``exec_lease_seconds`` …)."""
    policy_path = workdir / "policy.yml"
    policy_path.write_text(policy_yaml, encoding="utf-8")
    policy = _POLICIES.get(policy_yaml) or _POLICIES.setdefault(
        policy_yaml, load_policy(policy_path)
    )
    clock = ManualClock(start)
    store = await Store.open(database_url or await _fresh_sqlite(workdir))
    groups = StaticGroups(USERGROUPS)
    providers = ScriptedProviders(policy, clock)
    access = Access(
        authorizer=Authorizer(PolicyHolder(policy), groups), store=store, adapter_for=providers
    )
    notifier = RecordingNotifier()
    workflow = _workflow(access, notifier, instance_id, clock, **dict(workflow_settings))
    core = Core(
        policy_path,
        store,
        access,
        workflow,
        CommandService(access=access, workflow=workflow),
        notifier,
        clock,
        providers,
        groups,
        instance_id,
        workflow_settings,
    )
    try:
        yield core
    finally:
        for each in (workflow, *core.extra):
            await each.close()
        await store.close()
