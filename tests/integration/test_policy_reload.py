"""Live policy reload (SPEC §8): a changed file is read again within the check interval and
governs the next check; an invalid one is refused with the offending key, counted in
``gpuops_policy_reloads_total{result="invalid"}``, and the old policy keeps serving; SIGHUP
reloads a running ``gpuops serve`` without stopping it."""

from __future__ import annotations

import logging
import signal

import httpx
import pytest

from bot.local.demo.stack import DEMO_POLICY
from tests.conftest import StackFactory
from tests.support.guard_kit import answer_to
from tests.support.workflow_kit import ERIN, poll_until, serve_process

ERIN_EVERYWHERE = DEMO_POLICY.replace(
    "    role: viewer\n    channels: [C0INCIDENT]\n", "    role: viewer\n"
)
assert ERIN_EVERYWHERE != DEMO_POLICY


def reloads(result: str, metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(f'gpuops_policy_reloads_total{{result="{result}"}}'):
            return float(line.split()[-1])
    return 0.0


async def metrics_text(base_url: str) -> str:
    async with httpx.AsyncClient(timeout=5) as http:
        return (await http.get(f"{base_url}/metrics")).text


async def test_a_changed_file_is_picked_up_without_a_signal(make_stack: StackFactory) -> None:
    stack = await make_stack(extra_settings={"gpuops_policy_check_seconds": 0.1})
    # Erin may look only in #incident …
    nothing = "you have no projects you can view in this channel"
    assert nothing in await answer_to(stack, ERIN, "list", channel="C0RANDOM")
    stack.runtime.settings.gpuops_policy.write_text(ERIN_EVERYWHERE)
    await poll_until(lambda: stack.runtime.authorizer.policy.grants[-1].channels is None)
    # … and, once the file changed, anywhere
    assert nothing not in await answer_to(stack, ERIN, "list", channel="C0RANDOM")


async def test_an_invalid_file_keeps_the_old_policy_and_says_which_key(
    make_stack: StackFactory, caplog: pytest.LogCaptureFixture
) -> None:
    stack = await make_stack()
    before = reloads("invalid", await metrics_text(stack.base_url))
    path = stack.runtime.settings.gpuops_policy
    path.write_text(DEMO_POLICY.replace("expire_after_minutes: 30", "expire_after_minutes: -1"))
    with caplog.at_level(logging.ERROR, logger="bot.core.policy_reload"):
        assert await stack.runtime.reload_policy() == "invalid"
    assert "approvals.expire_after_minutes" in caplog.text
    assert "stays in force" in caplog.text and stack.runtime.reloader.in_force in caplog.text
    assert reloads("invalid", await metrics_text(stack.base_url)) == before + 1
    assert stack.runtime.authorizer.policy.approvals.expire_after_minutes == 30
    assert "e2e-delhi" in await answer_to(stack, ERIN, "list")  # still serving
    path.write_text(DEMO_POLICY.replace("    projects: [together-prod, e2e-delhi]\n", ""))
    assert await stack.runtime.reload_policy() == "invalid"  # a grant without projects


async def test_sighup_reloads_a_running_server_and_it_keeps_serving(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    async with serve_process(stack, "hup-1") as served:
        stack.runtime.settings.gpuops_policy.write_text(ERIN_EVERYWHERE)
        served.process.send_signal(signal.SIGHUP)

        def reloaded() -> bool:
            return "reloaded: hash" in served.log_path.read_text()

        await poll_until(reloaded, within=10)
        assert served.process.returncode is None
        assert reloads("reloaded", await metrics_text(served.base_url)) == 1
        result = await served.sender.command(ERIN, "C0RANDOM", "list")
        assert result.status == 200
