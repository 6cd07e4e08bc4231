"""Staged scale over real HTTP (SPEC §14): signed Slack requests → the bot → the Together
simulator → the Slack stand-in. One `/gpu update … step= soak=` is one request whose root
lists every step with its price and shows the plan's progress with its buttons; each step
is sent once and its result told in the thread; a step's new nodes unhealthy or a
remediation raised during its soak (the simulator's faults) stop the plan with the size
reached and Resume / Revert to start; the root's buttons steer it, for the right people
only."""

from __future__ import annotations

import httpx
import pytest

from bot.core.store import RequestState as S
from bot.core.store.plans import PlanState, PlanStore
from bot.local.demo.stack import WATCHED_DEMO_POLICY, LocalStack
from bot.local.slack.files import UploadedFile
from tests.conftest import StackFactory
from tests.support.slack_support import command_reply, roots
from tests.support.step_kit import ended, inputs, run_step
from tests.support.workflow_kit import (
    ALICE,
    BOB,
    CHANNEL,
    DAVE,
    MALLORY,
    REQUEST_ID,
    Opened,
    buttons,
    next_ephemeral,
    readable_text,
    request,
    wait_reply,
    wait_state,
)

CLUSTER = "tc-h200-ondemand"  # 8 GPUs, H200 at $3.79 per GPU-hour in the watched demo policy
POLICY = WATCHED_DEMO_POLICY + "staged:\n  soak: 1s\n  steady_within: 30s\n"


@pytest.fixture
async def stack(make_stack: StackFactory) -> LocalStack:
    watch_fast = {"gpuops_watch_every_seconds": 0.2}
    return await make_stack(policy_yaml=POLICY, transition_seconds=0.2, extra_settings=watch_fast)


async def _arm(stack: LocalStack, fault: dict[str, object]) -> None:
    async with httpx.AsyncClient() as http:
        answer = await http.post(f"http://127.0.0.1:{stack.together.port}/_sim/faults", json=fault)
    assert answer.status_code == 200, answer.text


async def _press(stack: LocalStack, opened: Opened, user: str, action_id: str) -> str:
    seen = len(stack.slack.ephemerals_for(user))
    result = await stack.sender.block_action(
        user, CHANNEL, action_id=action_id, value=opened.id, message_ts=opened.root_ts
    )
    assert result.status == 200 and result.acked_in_time, result
    return (await next_ephemeral(stack, user, seen)).text


def _files(stack: LocalStack) -> list[UploadedFile]:
    return [
        stack.slack.files[file["id"]]
        for message in stack.slack.messages.get(CHANNEL, [])
        if message.source == "files.completeUploadExternal"
        for file in message.files
    ]


def _root_buttons(stack: LocalStack, opened: Opened) -> dict[str, str]:
    root = stack.slack.message(CHANNEL, opened.root_ts)
    assert root is not None
    return buttons(root)


async def test_a_plan_of_four_steps_reaches_its_target(stack: LocalStack) -> None:
    text = f"update together-prod {CLUSTER} num_gpus=40 step=8 soak=1s"
    opened = await request(stack, DAVE, text, approval=False)
    root = stack.slack.message(CHANNEL, opened.root_ts)
    assert root is not None
    shown = readable_text(root)
    assert "In steps: num_gpus 8 → 16 → 24 → 32 → 40 GPUs in 4 steps of 8" in shown
    assert "Step 1/4: 8 → 16 GPUs, ≈ +$30.32/h (+$30.32/h in all)" in shown
    assert "Step 4/4: 32 → 40 GPUs, ≈ +$30.32/h (+$121.28/h in all)" in shown
    record = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED, within=60)
    assert record.result_message == (
        "Plan complete in 4 steps: num_gpus 8 → 16 → 24 → 32 → 40 GPUs"
    )
    puts = [c.body for c in stack.together.calls("update", "PUT")]
    assert puts == [{"num_gpus": n} for n in (16, 24, 32, 40)]
    for n in range(1, 5):
        await wait_reply(stack, opened, f"Step {n}/4 ({8 * n} → {8 * n + 8} GPUs) passed its soak")
    await wait_reply(stack, opened, "Plan complete: num_gpus is 40 GPUs.")
    final = stack.slack.message(CHANNEL, opened.root_ts)
    edits = [
        (c.args.get("text"), "plan_" in str(c.args.get("blocks")), getattr(c, "error", None))
        for c in stack.slack.calls_to("chat.update")
        if c.args.get("ts") == opened.root_ts
    ]
    assert final is not None and "plan_pause" not in buttons(final), edits
    trail = await stack.runtime.store.list_audit(request_id=opened.id, limit=100)
    events = [e.event for e in reversed(trail)]
    assert events.count("plan_send") == 4 and events.count("plan_pass") == 3
    assert "plan_complete" in events

    # /gpu audit and /gpu timeline show each step.
    audit = await command_reply(stack, ALICE, CHANNEL, "audit together-prod 60")
    assert audit.text.count("plan_send") >= 4 and "plan_complete" in audit.text
    before = len(_files(stack))
    whisper = await command_reply(stack, DAVE, CHANNEL, "timeline")
    assert "the file follows here" in whisper.text
    file = await stack.slack.wait_for(lambda: next(iter(_files(stack)[before:]), None))
    for n in range(1, 5):
        assert f"**{opened.id}** plan step {n}/4 sent by gpuops" in file.text, file.text
    assert f"**{opened.id}** plan step 4/4 passed its soak, plan complete by gpuops" in file.text


async def test_new_nodes_unhealthy_stop_the_plan_and_revert_to_start(stack: LocalStack) -> None:
    await _arm(stack, {"kind": "new_nodes_unhealthy", "route": "update"})
    text = f"update together-prod {CLUSTER} num_gpus=40 step=8 soak=1s"
    opened = await request(stack, DAVE, text, approval=False)
    stopped = await wait_reply(stack, opened, "Plan stopped at step 1/4")
    assert "the cluster is not healthy (16 GPUs reached): 1 node is not Ready" in stopped.text
    assert "Resume to go on or Revert to start (8 GPUs)." in stopped.text
    await stack.slack.wait_for(lambda: "plan_revert" in _root_buttons(stack, opened) or None)
    assert set(_root_buttons(stack, opened)) == {"plan_resume", "plan_abort", "plan_revert"}
    assert len(stack.together.calls("update", "PUT")) == 1

    told = await _press(stack, opened, DAVE, "plan_revert")
    assert "waiting for approval" in told and "num_gpus 16 → 8" in told
    await wait_state(stack.runtime.store, opened.id, S.FAILED)
    plan = await PlanStore(stack.runtime.store).get(opened.id)
    assert plan is not None and plan.state is PlanState.REVERTED
    reverts = await stack.runtime.store.list_reverts(opened.id)
    assert len(reverts) == 1 and reverts[0].plan["inputs"] == {"num_gpus": 8}


async def test_a_remediation_during_the_soak_stops_the_plan(stack: LocalStack) -> None:
    await _arm(stack, {"kind": "remediation_in_soak", "route": "update", "seconds": 0.1})
    text = f"update together-prod {CLUSTER} num_gpus=40 step=8 soak=10m"
    opened = await request(stack, DAVE, text, approval=False)
    stopped = await wait_reply(stack, opened, "Plan stopped at step 1/4")
    assert "a new alert on the cluster during the soak (16 GPUs reached)" in stopped.text
    assert "the watcher raised a remediation on node" in stopped.text
    assert len(stack.together.calls("update", "PUT")) == 1


async def test_the_roots_buttons_steer_it_for_the_right_people(stack: LocalStack) -> None:
    text = f"update together-prod {CLUSTER} num_gpus=40 step=8 soak=10m"
    opened = await request(stack, DAVE, text, approval=False)
    await wait_reply(stack, opened, "Step 1/4 (8 → 16 GPUs) is steady")
    # Soaking for 10 minutes: the root shows where the plan is and its buttons.
    await stack.slack.wait_for(lambda: _root_buttons(stack, opened) or None)
    assert _root_buttons(stack, opened) == {"plan_pause": opened.id, "plan_abort": opened.id}
    root = stack.slack.message(CHANNEL, opened.root_ts)
    assert root is not None
    assert "Plan running, step 1/4 (8 → 16 GPUs) steady, soaking" in readable_text(root)
    refused = await _press(stack, opened, MALLORY, "plan_abort")
    assert "no such project or no access" in refused
    paused = await _press(stack, opened, BOB, "plan_pause")
    assert "paused by" in paused
    await stack.slack.wait_for(lambda: "plan_resume" in _root_buttons(stack, opened) or None)
    aborted = await _press(stack, opened, DAVE, "plan_abort")
    assert "aborted by" in aborted
    record = await wait_state(stack.runtime.store, opened.id, S.FAILED)
    assert record.result_message == (
        "Plan aborted with 16 GPUs reached (of 8 → 40); no further step was sent"
    )
    assert len(stack.together.calls("update", "PUT")) == 1


async def test_a_workflow_step_with_a_plan_completes_only_when_the_plan_ends(
    stack: LocalStack,
) -> None:
    change = "num_gpus=24 step=8 soak=10m"
    run = await run_step(stack, inputs("together-prod", CLUSTER, change))
    root = await stack.slack.wait_for(
        lambda: next((m for m in roots(stack, CHANNEL) if REQUEST_ID.search(m.text)), None)
    )
    found = REQUEST_ID.search(root.text)
    assert found is not None
    opened = Opened(found.group(0), CHANNEL, root.ts, None)
    await wait_reply(stack, opened, "Step 1/2 (8 → 16 GPUs) is steady")
    assert run.state == "running"  # the plan soaks: the step waits for it
    await _press(stack, opened, DAVE, "plan_abort")
    await ended(stack, run, within=20)
    assert run.state != "running"
    assert len(stack.together.calls("update", "PUT")) == 1
