"""The App Home tab end to end over real HTTP: app_home_opened publishes it (views.publish
on the Slack stand-in), its buttons act with the request's own channel, it is republished
when a request changes state; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import yaml

from bot.core.store import RequestState
from bot.local.demo.stack import DEMO_POLICY, LocalStack
from bot.local.slack.models import View
from bot.metrics import HOME_PUBLISHES
from bot.slack.home import NO_PROJECTS
from bot.slack.render.forms import BREAK_GLASS_CALLBACK
from tests.conftest import StackFactory
from tests.support.slack_support import provider_writes, refusals
from tests.support.workflow_kit import (
    ALICE,
    BOB,
    CAROL,
    DAVE,
    ERIN,
    MALLORY,
    deny,
    request,
    wait_reply,
    wait_state,
)

FAST = {"gpuops_home_refresh_seconds": 0.2}


async def home_stack(make_stack: StackFactory, database_url: str, **overrides: Any) -> LocalStack:
    return await make_stack(database_url=database_url, extra_settings=FAST, **overrides)


def versions(stack: LocalStack, user: str) -> int:
    home = stack.slack.home_of(user)
    return 0 if home is None else len(home.history) + 1


def text_of(home: View) -> str:
    return json.dumps(home.blocks, ensure_ascii=False)


async def open_home(stack: LocalStack, user: str) -> View:
    """``user`` opens the Home tab; wait for the view published for them after that."""
    before = versions(stack, user)
    result = await stack.sender.app_home_opened(user)
    assert result.status == 200, result
    await stack.slack.wait_for(lambda: versions(stack, user) > before, within=15)
    home = stack.slack.home_of(user)
    assert home is not None
    return home.model_copy(deep=True)  # the tab as it is now (the stand-in's changes later)


async def republished(stack: LocalStack, user: str, after: int, needle: str) -> View:
    """Wait until the user's Home was published again and says ``needle``."""

    def fresh() -> View | None:
        home = stack.slack.home_of(user)
        if home is None or versions(stack, user) <= after or needle not in text_of(home):
            return None
        return home

    return await stack.slack.wait_for(fresh, within=15)


async def test_approving_from_home_runs_it_once_and_both_homes_are_republished(
    make_stack: StackFactory, database_url: str
) -> None:
    stack = await home_stack(make_stack, database_url)
    opened = await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=2")
    bob_home = await open_home(stack, BOB)
    dave_home = await open_home(stack, DAVE)
    assert f'"value": "{opened.id}"' in text_of(bob_home)
    assert "approve_request" in text_of(bob_home)
    assert "≈ +₹3,990.40/h" in text_of(bob_home)  # the price of the change, on its entry
    assert "cancel_request" in text_of(dave_home) and "approve_request" not in text_of(dave_home)
    bob_before, dave_before = versions(stack, BOB), versions(stack, DAVE)

    result = await stack.sender.home_action(BOB, action_id="approve_request", value=opened.id)
    assert result.status == 200, result
    await wait_state(stack.runtime.store, opened.id, RequestState.SUCCEEDED)
    assert len(provider_writes(stack)) == 1

    # Both tabs show the outcome without being opened again.
    await republished(stack, DAVE, dave_before, "Your recent results* (1)")
    bob_after = await republished(stack, BOB, bob_before, "Nothing is waiting for you.")
    assert opened.id not in text_of(bob_after)
    # The same click from the tab as it was (a second delivery, an old client) runs nothing.
    stack.slack.homes[BOB] = bob_home
    await stack.sender.home_action(BOB, action_id="approve_request", value=opened.id)
    await stack.slack.wait_for(
        lambda: stack.slack.messages.get(stack.slack.dm_channel(BOB)), within=15
    )
    assert len(provider_writes(stack)) == 1


TWO_FOR_SCALE_DOWN = DEMO_POLICY.replace(
    "  break_glass: true\n",
    "  break_glass: true\n  rules:\n    - projects: [together-prod]\n"
    "      kinds: [scale_down]\n      approvers: 2\n",
)


async def test_home_shows_how_far_a_two_approver_request_is_as_the_prompt_does(
    make_stack: StackFactory, database_url: str
) -> None:
    assert TWO_FOR_SCALE_DOWN != DEMO_POLICY
    stack = await home_stack(make_stack, database_url, policy_yaml=TWO_FOR_SCALE_DOWN)
    opened = await request(stack, DAVE, "update together-prod tc-h100-reserved num_gpus=8")
    needs = "scale_down needs 2 approvers (approval rule of together-prod)"
    assert f"{needs} · 0 of 2: none yet" in text_of(await open_home(stack, BOB))
    await stack.sender.home_action(BOB, action_id="approve_request", value=opened.id)
    await wait_reply(stack, opened, "(1 of 2)")
    prompt = stack.slack.message(opened.channel, opened.prompt_ts or "")
    assert prompt is not None and f"{needs} · 1 of 2: <@U02BOB>" in prompt.text
    carol = await open_home(stack, CAROL)  # still waiting for Carol, and how far it is
    assert f"{needs} · 1 of 2: <@U02BOB>" in text_of(carol) and opened.id in text_of(carol)
    dave = await open_home(stack, DAVE)  # the requester's open request says so too
    assert f"{needs} · 1 of 2: <@U02BOB>" in text_of(dave)
    assert await wait_state(stack.runtime.store, opened.id, RequestState.PENDING)


async def test_a_user_with_no_grant_sees_no_project_and_a_scoped_grant_shows_none(
    make_stack: StackFactory, database_url: str
) -> None:
    stack = await home_stack(make_stack, database_url)
    for user in (MALLORY, ERIN):  # no grant; a viewer grant that holds only in #incident
        text = text_of(await open_home(stack, user))
        assert "e2e-delhi" not in text and "together-prod" not in text
        assert NO_PROJECTS in text
    bob = text_of(await open_home(stack, BOB))
    assert "e2e-delhi:101" in bob


async def test_a_channel_scoped_approver_grant_that_does_not_hold_there_refuses_the_click(
    make_stack: StackFactory, database_url: str
) -> None:
    policy = yaml.safe_load(DEMO_POLICY)
    for grant in policy["grants"]:
        if grant.get("users") == [BOB]:
            grant["channels"] = ["C0RANDOM"]
    # Bob approves only in #random; the request is asked in #incident.
    stack = await home_stack(make_stack, database_url, policy_yaml=yaml.safe_dump(policy))
    opened = await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=2")
    home = await open_home(stack, BOB)
    assert opened.id not in text_of(home)  # not listed for him …
    # … and a click anyway (a tab published before the policy changed) is refused.
    stale = home.model_copy(deep=True)
    stale.view["blocks"] = [
        {
            "type": "actions",
            "block_id": f"home_decide:{opened.id}",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Approve"},
                    "action_id": "approve_request",
                    "value": opened.id,
                }
            ],
        }
    ]
    stack.slack.homes[BOB] = stale
    await stack.sender.home_action(BOB, action_id="approve_request", value=opened.id)
    refused = await stack.slack.wait_for(
        lambda: next((m for m in stack.slack.messages.get(stack.slack.dm_channel(BOB), [])), None),
        within=15,
    )
    assert "#C0RANDOM" in refused.text or "C0RANDOM" in refused.text
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is RequestState.PENDING
    assert [e.request_id for e in await refusals(stack, BOB)] == [opened.id]
    assert provider_writes(stack) == []


async def test_show_from_home_posts_the_summary_by_dm(
    make_stack: StackFactory, database_url: str
) -> None:
    stack = await home_stack(make_stack, database_url)
    await open_home(stack, BOB)
    result = await stack.sender.home_action(
        BOB, action_id="home_show_cluster", value="e2e-delhi:101"
    )
    assert result.status == 200
    card = await stack.slack.wait_for(
        lambda: next(iter(stack.slack.messages.get(stack.slack.dm_channel(BOB), [])), None),
        within=15,
    )
    assert "101" in json.dumps(card.blocks)


async def test_a_failed_publish_is_counted_and_never_breaks_the_change(
    make_stack: StackFactory, database_url: str
) -> None:
    stack = await home_stack(make_stack, database_url)
    opened = await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=2")
    await open_home(stack, BOB)
    failed_before = HOME_PUBLISHES.labels("failed")._value.get()
    stack.slack.fail("views.publish", error="internal_error", times=-1)
    result = await stack.sender.home_action(BOB, action_id="approve_request", value=opened.id)
    assert result.status == 200
    await wait_state(stack.runtime.store, opened.id, RequestState.SUCCEEDED)
    await stack.slack.wait_for(
        lambda: HOME_PUBLISHES.labels("failed")._value.get() > failed_before, within=15
    )
    assert len(provider_writes(stack)) == 1


async def test_a_rate_limited_publish_is_sent_again_after_retry_after(
    make_stack: StackFactory, database_url: str
) -> None:
    stack = await home_stack(make_stack, database_url)
    failed_before = HOME_PUBLISHES.labels("failed")._value.get()
    stack.slack.fail("views.publish", "ratelimited", times=1)
    home = await open_home(stack, BOB)
    assert "e2e-delhi:101" in text_of(home)
    calls = stack.slack.calls_to("views.publish")
    # the 429, then the same view once Retry-After had passed
    assert [(c.status, c.error) for c in calls] == [(429, "ratelimited"), (200, None)]
    assert calls[1].at - calls[0].at >= 0.9
    assert HOME_PUBLISHES.labels("failed")._value.get() == failed_before


async def test_the_requester_cancels_from_home_and_an_admin_self_approval_asks_for_a_reason(
    make_stack: StackFactory, database_url: str
) -> None:
    stack = await home_stack(make_stack, database_url)
    opened = await request(stack, DAVE, "action e2e-delhi 103 scale_cluster additional_nodes=1")
    dave = await open_home(stack, DAVE)
    assert f"home_open:{opened.id}" in text_of(dave)
    await stack.sender.home_action(DAVE, action_id="cancel_request", value=opened.id)
    await wait_state(stack.runtime.store, opened.id, RequestState.CANCELLED)

    # Alice (admin) requests, then approves her own request from Home: the break-glass form
    # opens, and it decides in the request's channel.
    own = await request(stack, ALICE, "action e2e-delhi 105 scale_cluster additional_nodes=1")
    home = await open_home(stack, ALICE)
    assert f"home_decide:{own.id}" not in text_of(home)  # never one's own as an approval
    stale = home.model_copy(deep=True)
    stale.view["blocks"] = [
        {
            "type": "actions",
            "block_id": f"home_decide:{own.id}",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Approve"},
                    "action_id": "approve_request",
                    "value": own.id,
                }
            ],
        }
    ]
    stack.slack.homes[ALICE] = stale
    await stack.sender.home_action(ALICE, action_id="approve_request", value=own.id)
    form = await stack.slack.wait_for(
        lambda: stack.slack.last_view_for(ALICE, open_only=True), within=15
    )
    assert form.callback_id == BREAK_GLASS_CALLBACK
    assert json.loads(form.private_metadata)["channel"] == own.channel
    await stack.sender.view_submission(ALICE, form.id, {"reason": "capacity for the incident"})
    await wait_state(stack.runtime.store, own.id, RequestState.SUCCEEDED)
    assert len(provider_writes(stack)) == 1


async def test_deny_from_home_asks_for_a_reason_that_reaches_the_thread_and_the_audit(
    make_stack: StackFactory, database_url: str
) -> None:
    stack = await home_stack(make_stack, database_url)
    opened = await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=2")
    assert "deny_request" in text_of(await open_home(stack, BOB))
    result = await stack.sender.home_action(BOB, action_id="deny_request", value=opened.id)
    assert result.status == 200, result
    form = await stack.slack.wait_for(
        lambda: stack.slack.last_view_for(BOB, open_only=True), within=15
    )
    assert form.callback_id == "gpu_deny"  # the thread's deny form, deciding in its channel
    assert json.loads(form.private_metadata)["channel"] == opened.channel
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is RequestState.PENDING  # nothing yet

    reason = "the training run finishes tonight; scale tomorrow"
    submitted = await stack.sender.view_submission(BOB, form.id, {"reason": reason})
    assert submitted.status == 200 and not submitted.problems, submitted
    record = await wait_state(stack.runtime.store, opened.id, RequestState.DENIED)
    assert record.decided_by == BOB and record.decision_note == reason
    note = await wait_reply(stack, opened, reason)
    assert "Denied" in note.text and BOB in note.text
    denied = await stack.runtime.store.list_audit(request_id=opened.id)
    assert [e.detail.get("reason") for e in denied if e.event == "denied"] == [reason]
    assert provider_writes(stack) == []


async def test_deny_from_a_home_tab_gone_stale_is_refused_by_dm_without_a_form(
    make_stack: StackFactory, database_url: str
) -> None:
    stack = await home_stack(make_stack, database_url)
    opened = await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=2")
    stale = await open_home(stack, BOB)
    await deny(stack, opened, ALICE)  # in the thread, meanwhile
    await wait_state(stack.runtime.store, opened.id, RequestState.DENIED)
    stack.slack.homes[BOB] = stale  # the tab as it was, its Deny button still there
    await stack.sender.home_action(BOB, action_id="deny_request", value=opened.id)
    refused = await stack.slack.wait_for(
        lambda: next(iter(stack.slack.messages.get(stack.slack.dm_channel(BOB), [])), None),
        within=15,
    )
    assert f"{opened.id} was already denied by <@{ALICE}>" in refused.text
    assert stack.slack.last_view_for(BOB, open_only=True) is None  # no form for nothing
    assert [e.request_id for e in await refusals(stack, BOB)] == [opened.id]


async def test_with_the_messages_tab_off_a_dm_is_refused_as_slack_refuses_it(
    make_stack: StackFactory,
) -> None:
    """The stand-in is as strict as Slack: an app without its Messages tab cannot DM."""
    stack = await make_stack()
    stack.slack.messages_tab_enabled = False
    await open_home(stack, BOB)
    await stack.sender.home_action(BOB, action_id="home_show_cluster", value="e2e-delhi:101")
    refused = await stack.slack.wait_for(
        lambda: next((c for c in stack.slack.calls_to("chat.postMessage") if c.error), None),
        within=15,
    )
    assert refused.error == "messages_tab_disabled"
    assert stack.slack.messages.get(stack.slack.dm_channel(BOB), []) == []
