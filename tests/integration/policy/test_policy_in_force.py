"""One policy in force: every reader holds the one holder and reads it at each use, so
after a reload the access checks, the authorizer, the provider registry, the watcher, the
reloader and Home all see the new policy (nobody kept a copy of the old one)."""

from __future__ import annotations

from bot.core.home import HomeBuilder
from bot.local.demo.stack import DEMO_POLICY
from tests.conftest import StackFactory
from tests.support.workflow_kit import ERIN

ERIN_EVERYWHERE = DEMO_POLICY.replace(
    "    role: viewer\n    channels: [C0INCIDENT]\n", "    role: viewer\n"
)


async def test_after_a_reload_every_reader_sees_the_new_policy(make_stack: StackFactory) -> None:
    stack = await make_stack()
    runtime = stack.runtime
    access = runtime.ops.access
    home = HomeBuilder(access.authorizer, runtime.store, access.adapter_for)
    before = runtime.holder.current
    assert (await home.build(ERIN)).projects == []  # a channel-scoped grant: not on Home
    runtime.settings.gpuops_policy.write_text(ERIN_EVERYWHERE)
    assert await runtime.reload_policy() == "reloaded"
    now = runtime.holder.current
    assert now is not before and now.grants[-1].channels is None
    readers = {
        "access": access.policy,
        "authorizer": access.authorizer.policy,
        "registry": runtime.registry.policy,
        "watcher": runtime.watcher.policy,
        "reloader": runtime.reloader.policy,
        "workflow": runtime.workflow.deps.policy,
        "runtime": runtime.policy,
    }
    assert {name for name, policy in readers.items() if policy is not now} == set()
    shown = [project.name for project in (await home.build(ERIN)).projects]
    assert shown == ["e2e-delhi", "together-prod"]  # Home reads the new grants


async def test_a_project_whose_settings_changed_gets_a_new_adapter(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    registry = stack.runtime.registry
    kept, changed = registry.get("e2e-delhi"), registry.get("together-prod")
    text = stack.runtime.settings.gpuops_policy.read_text()
    moved = text.replace("project_id: proj-123", "project_id: proj-moved")
    assert moved != text
    stack.runtime.settings.gpuops_policy.write_text(moved)
    assert await stack.runtime.reload_policy() == "reloaded"
    assert registry.get("e2e-delhi") is kept
    assert registry.get("together-prod") is not changed
