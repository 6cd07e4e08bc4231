"""Health alerts (SPEC §7.2) over real HTTP on SQLite and PostgreSQL: a degraded then
restored cluster gets one root (with its summary and the next step as a button), the
root edited, one reply in its thread; a restart in between repeats nothing; the button
opens the prefilled form under the normal policy."""

from __future__ import annotations

import asyncio

from bot.local.demo.stack import LocalStack
from bot.local.slack.models import Message
from tests.conftest import StackFactory
from tests.support.watch_kit import (
    CLUSTER,
    HEALTH_POLICY,
    NOTIFY,
    WATCH_EVERY,
    incident_roots,
    press,
    until,
    watched_stack,
)
from tests.support.workflow_kit import BOB, MALLORY, buttons, readable_text


async def degraded_root(stack: LocalStack, status: str = "Degraded") -> Message:
    # After a whole first poll (the next one has begun): the watcher has seen it healthy.
    await until(lambda: len(stack.together.calls("list")) >= 2)
    stack.together.degrade(CLUSTER, status)
    return await stack.slack.wait_for(
        lambda: next(iter(incident_roots(stack, CLUSTER)), None), within=10
    )


async def test_degraded_then_restored_one_root_one_reply_even_across_a_restart(
    database_url: str, make_stack: StackFactory
) -> None:
    stack = await watched_stack(make_stack, database_url=database_url, policy_yaml=HEALTH_POLICY)
    root = await degraded_root(stack)
    text = readable_text(root)
    assert "train-h100-reserved" in text and "*Degraded*" in text and "(was Ready)" in text
    assert buttons(root) == {"open_update_form": f"together-prod:{CLUSTER}"}
    assert "Incident 1 of this cluster · watched by gpuops" in text

    await stack.restart_bot()
    await asyncio.sleep(WATCH_EVERY * 4)  # polls after the restart: still one root
    assert len(incident_roots(stack, CLUSTER)) == 1

    stack.together.restore(CLUSTER)
    reply = await stack.slack.wait_for(
        lambda: next(iter(stack.slack.replies(NOTIFY, root.ts)), None), within=10
    )
    assert "Healthy again" in readable_text(reply) and "*Ready*" in readable_text(reply)
    edited = await stack.slack.wait_for(
        lambda: (m := stack.slack.message(NOTIFY, root.ts)) and "recovered" in m.text and m
    )
    assert not buttons(edited)
    assert "Incident 1 of this cluster · closed" in readable_text(edited)
    await asyncio.sleep(WATCH_EVERY * 4)
    assert len(incident_roots(stack, CLUSTER)) == 1
    assert len(stack.slack.replies(NOTIFY, root.ts)) == 1
    rows = await stack.runtime.store.list_audit(project="together-prod", limit=50)
    health = [str(r.outcome) for r in rows if r.event == "health_alert" and r.cluster_id == CLUSTER]
    assert sorted(health) == ["opened", "recovered"]


async def test_a_status_change_edits_the_root_and_a_new_incident_gets_a_new_root(
    make_stack: StackFactory,
) -> None:
    stack = await watched_stack(make_stack, policy_yaml=HEALTH_POLICY)
    root = await degraded_root(stack)
    stack.together.degrade(CLUSTER, "Failed")
    await stack.slack.wait_for(
        lambda: (m := stack.slack.message(NOTIFY, root.ts)) and "*Failed*" in readable_text(m)
    )
    stack.together.restore(CLUSTER)
    await stack.slack.wait_for(lambda: stack.slack.replies(NOTIFY, root.ts), within=10)
    stack.together.degrade(CLUSTER, "Degraded")
    second = await stack.slack.wait_for(
        lambda: len(roots := incident_roots(stack, CLUSTER)) == 2 and roots[1], within=10
    )
    assert "Incident 2 of this cluster · watched by gpuops" in readable_text(second)


async def test_the_next_step_button_opens_the_prefilled_form_under_the_policy(
    make_stack: StackFactory,
) -> None:
    stack = await watched_stack(make_stack, policy_yaml=HEALTH_POLICY)
    root = await degraded_root(stack)
    await press(stack, root, BOB, "open_update_form")
    view = await stack.slack.wait_for(
        lambda: (
            (v := stack.slack.last_view_for(BOB, open_only=True))
            and v.view.get("callback_id") == "gpu_update"
            and "train-h100-reserved" in str(v.view.get("blocks"))
            and v
        )
    )
    assert view.view["callback_id"] == "gpu_update"
    await press(stack, root, MALLORY, "open_update_form")
    refusal = await stack.slack.wait_for(
        lambda: (v := stack.slack.last_view_for(MALLORY)) and "no access" in str(v.view) and v
    )
    assert refusal.view.get("callback_id") == "gpu_update"
    assert "input" not in {block.get("type") for block in refusal.view.get("blocks", [])}


_E2E_NOTIFY = "    auth_token_env: E2E_AUTH_TOKEN\n    notify_channel: C0GPUAUDIT\n"
E2E_HEALTH_POLICY = HEALTH_POLICY.replace(
    _E2E_NOTIFY, _E2E_NOTIFY + "    watch:\n      every_seconds: 15\n"
)


async def test_a_failed_e2e_cluster_alert_offers_no_action_and_says_why(
    make_stack: StackFactory,
) -> None:
    # E2E runs actions only on a Running cluster: a button would open a form every
    # submission of which is refused.
    assert E2E_HEALTH_POLICY != HEALTH_POLICY
    stack = await watched_stack(make_stack, policy_yaml=E2E_HEALTH_POLICY)
    await until(lambda: len(stack.e2e.calls("list")) >= 2)
    stack.e2e.degrade("101", "Failed")
    root = await stack.slack.wait_for(
        lambda: next(iter(incident_roots(stack, "101")), None), within=10
    )
    text = readable_text(root)
    assert "*Failed*" in text and "e2e-delhi" in text
    assert buttons(root) == {}
    assert "E2E runs no action on a cluster that is Failed" in text


async def test_a_cluster_that_disappears_gets_one_root_without_buttons(
    make_stack: StackFactory,
) -> None:
    stack = await watched_stack(make_stack, policy_yaml=HEALTH_POLICY)
    await until(lambda: len(stack.together.calls("list")) >= 2)
    stack.together.remove(CLUSTER)
    root = await stack.slack.wait_for(
        lambda: next(iter(incident_roots(stack, CLUSTER)), None), within=10
    )
    assert "no longer listed by its provider" in readable_text(root) and not buttons(root)
    await asyncio.sleep(WATCH_EVERY * 4)
    assert len(incident_roots(stack, CLUSTER)) == 1
