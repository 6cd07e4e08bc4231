"""Live policy reload (SPEC §8): a changed file is read again within the check interval and
governs the next check; an invalid one is refused with the offending key, counted in
``gpuops_policy_reloads_total{result="invalid"}``, and the old policy keeps serving; SIGHUP
reloads a running ``gpuops serve`` without stopping it."""

from __future__ import annotations

import logging
import signal

import httpx
import pytest

from bot.core.policy.reload import policy_hash
from bot.core.store import RequestState as S
from bot.local.demo.stack import DEMO_POLICY, LocalStack
from tests.conftest import StackFactory
from tests.support.guard_kit import answer_to
from tests.support.workflow_kit import (
    BOB,
    CAROL,
    CHANNEL,
    DAVE,
    ERIN,
    audit_trail,
    click,
    events,
    poll_until,
    request,
    serve_process,
    wait_mirror,
    wait_reply,
)

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
    with caplog.at_level(logging.ERROR, logger="bot.core.policy.reload"):
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


SCALE_NEEDS_TWO = DEMO_POLICY.replace(
    "  break_glass: true\n",
    "  break_glass: true\n  rules:\n"
    "    - projects: [e2e-delhi]\n      kinds: [scale_cluster]\n      approvers: 2\n",
)
assert SCALE_NEEDS_TWO != DEMO_POLICY
ONE_FROM_PLATFORM = SCALE_NEEDS_TWO.replace(
    "      approvers: 2\n", "      approvers: 1\n      usergroups: [S0PLATFORM]\n"
)  # bob is not in S0PLATFORM


async def test_a_reload_shows_pending_requests_what_approving_them_takes_now(
    make_stack: StackFactory,
) -> None:
    """The new policy governs approvals of requests made before it (SPEC §8): their prompt
    and thread say what approving them takes now, once across replicas, and an approval
    given before counts under the new rule."""
    stack = await make_stack()
    opened = await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=1")
    prompt = stack.slack.message(CHANNEL, opened.prompt_ts or "")
    assert prompt is not None and "needs 1 approver (default of e2e-delhi)" in prompt.text

    path = stack.runtime.settings.gpuops_policy
    path.write_text(SCALE_NEEDS_TWO)
    assert await stack.runtime.reload_policy() == "reloaded"
    note = await wait_reply(stack, opened, "The policy was reloaded")
    assert "needs 2 approvers (approval rule of e2e-delhi)" in note.text
    prompt = stack.slack.message(CHANNEL, opened.prompt_ts or "")
    assert prompt is not None and "needs 2 approvers (approval rule of e2e-delhi)" in prompt.text
    assert "Approve" in str(prompt.blocks)  # its buttons stay
    # Another replica reloading the same file finds it noted: nothing said twice.
    assert await stack.runtime.workflow.policy_reloaded() == 0
    trail = events(await audit_trail(stack.runtime.store, opened.id))
    assert trail == ["requested", "approval_rule_changed"]

    await click(stack, opened, BOB)  # counted: 1 of 2
    await wait_reply(stack, opened, "1 of 2")
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.PENDING and record.approvers == [BOB]

    path.write_text(ONE_FROM_PLATFORM)  # one approver, but from a group bob is not in
    assert await stack.runtime.reload_policy() == "reloaded"
    gone = "0 of 1: none yet (no longer counted: <@U02BOB>)"
    grouped = await wait_reply(stack, opened, gone + ".")  # the note (the prompt has no ".")
    assert "The policy was reloaded" in grouped.text and "subteam^S0PLATFORM" in grouped.text
    assert "the next Approve sends it" not in grouped.text  # bob's approval counts no more
    prompt = stack.slack.message(CHANNEL, opened.prompt_ts or "")
    assert prompt is not None and gone in prompt.text  # never "1 of 1: @bob"
    [latest] = await stack.runtime.store.list_audit(request_id=opened.id, limit=1)
    assert (latest.event, latest.outcome) == ("approval_rule_changed", "0 of 1")

    # Back to one approver: bob's approval is enough (the rules removed by saying so).
    path.write_text(
        DEMO_POLICY.replace("  break_glass: true\n", "  break_glass: true\n  rules: []\n")
    )
    assert await stack.runtime.reload_policy() == "reloaded"
    again = await wait_reply(stack, opened, "the next Approve sends it")
    assert "1 of 1: <@U02BOB>" in again.text and "no longer counted" not in again.text
    prompt = stack.slack.message(CHANNEL, opened.prompt_ts or "")
    assert prompt is not None and "1 of 1: <@U02BOB>" in prompt.text
    assert stack.e2e.calls("action", "PUT") == []
    await click(stack, opened, BOB)
    await wait_mirror(stack, opened, "Change done")
    assert [p.body for p in stack.e2e.calls("action", "PUT")] == [
        {"action": "scale_cluster", "additional_nodes": 1}
    ]


SCALE_NEEDS_THREE = SCALE_NEEDS_TWO.replace("      approvers: 2\n", "      approvers: 3\n")
FIRST_PART = SCALE_NEEDS_TWO[: SCALE_NEEDS_TWO.index("  rules:\n")]  # valid: no rules
assert FIRST_PART == DEMO_POLICY


def kept_notices(stack: LocalStack) -> list[str]:
    """What the notify channel was told of files dropping the approval rules."""
    said = [m.text for m in stack.slack.messages.get("C0GPUAUDIT", [])]
    return [t for t in said if "was not taken" in t and "approvals.rules: absent" in t]


async def test_a_file_written_in_two_parts_is_not_taken_half_and_the_rule_holds(
    database_url: str, make_stack: StackFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Two replicas watch one policy file; it is written in two parts, the first a valid
    policy without the approval rules. Neither takes it: each logs why and counts it, the
    notify channel is told once, and a change needing 2 approvers still needs 2. The whole
    file, and then a new one written by rename, are taken once settled."""
    quick = {"gpuops_policy_check_seconds": 0.05, "gpuops_policy_quiet_seconds": 0.05}
    stack = await make_stack(
        policy_yaml=SCALE_NEEDS_TWO, database_url=database_url, extra_settings=quick
    )
    replica_b = await stack.start_replica("replica-b")
    replicas = [stack.runtime.reloader, replica_b.runtime.reloader]
    before = kept("section_lost", await metrics_text(stack.base_url))
    path = stack.runtime.settings.gpuops_policy

    def judged(result: str, reason: str | None = None) -> bool:
        return all(
            r.outcomes and (r.outcomes[-1].result, r.outcomes[-1].reason) == (result, reason)
            for r in replicas
        )

    half = policy_hash(FIRST_PART.encode())
    with caplog.at_level(logging.INFO, logger="bot.core.policy.reload"), path.open("w") as out:
        out.write(FIRST_PART)
        out.flush()  # the first part is the file for now
        # Both replicas have judged it (their log names its hash) …
        await poll_until(lambda: sum(half in r.getMessage() for r in caplog.records) == 2)
        opened = await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=1")
        await click(stack, opened, BOB, sender=replica_b.sender)

        async def approved_by_bob() -> bool:
            record = await stack.runtime.store.get_request(opened.id)
            return record is not None and record.approvers == [BOB]

        await poll_until(approved_by_bob)
        # … and the rule of the policy in force holds: one approval of two sends nothing.
        record = await stack.runtime.store.get_request(opened.id)
        assert record is not None and record.state is S.PENDING
        await wait_reply(stack, opened, "1 of 2")
        assert stack.e2e.calls("action", "PUT") == []

        await poll_until(lambda: judged("invalid", "section_lost"))
        [notice] = kept_notices(stack)  # one channel, told once by the two replicas
        assert "rules: []" in notice
        refusals = [r.getMessage() for r in caplog.records if "refused (section_lost)" in r.msg]
        assert len(refusals) == 2 and all("stays in force" in line for line in refusals)
        assert all(r.exc_info is None for r in caplog.records)  # one line each, no traceback
        metrics = await metrics_text(replica_b.base_url)
        assert kept("section_lost", metrics) == before + 2
        assert 'gpuops_policy_file_refused{reason="section_lost"} 1.0' in metrics

        out.write(SCALE_NEEDS_TWO[len(FIRST_PART) :])  # the second part: whole again
    await poll_until(lambda: judged("unchanged"))
    assert kept_notices(stack) == [notice]
    await click(stack, opened, CAROL)  # the second approver of two sends it
    await wait_mirror(stack, opened, "Change done")
    assert len(stack.e2e.calls("action", "PUT")) == 1

    staged = path.with_name(".policy.yml.new")  # the atomic way: write beside, then rename
    staged.write_text(SCALE_NEEDS_THREE)
    staged.replace(path)
    await poll_until(lambda: judged("reloaded"))
    for reloader in replicas:
        assert [rule.approvers for rule in reloader.policy.approvals.rules] == [3]
    assert replica_b.runtime.authorizer.policy.approvals.rules[0].approvers == 3
    metrics = await metrics_text(stack.base_url)
    assert 'gpuops_policy_file_refused{reason="section_lost"} 0.0' in metrics
    assert kept_notices(stack) == [notice]


def kept(reason: str, metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(f'gpuops_policy_kept_total{{reason="{reason}"}}'):
            return float(line.split()[-1])
    return 0.0
