"""Fleet guardrails over real HTTP (SPEC §8): limits at request and at approval after a
policy reload, prices in the preview, the prompt and App Home, N-approver rules with user
groups as the prompt shows them, and the two-replica race on the last approval. The rules'
logic on SQLite and PostgreSQL (the price limit, a deny after an approval, a reload taking
an approver's grant) is in tests/core/test_guardrails.py."""

from __future__ import annotations

import asyncio
import json

from bot.core.store import RequestState as S
from bot.local.demo.stack import DEMO_POLICY, LocalStack
from bot.slack.usergroups import SlackUserGroupResolver
from tests.conftest import StackFactory
from tests.integration.home.test_home_tab import open_home
from tests.support.guard_kit import answer_to, guard_policy
from tests.support.workflow_kit import (
    ALICE,
    BOB,
    CAROL,
    DAVE,
    Opened,
    audit_trail,
    click,
    events,
    next_ephemeral,
    readable_text,
    request,
    wait_reply,
    wait_root,
    wait_state,
    wait_unlocked,
)

DECOMMISSION = "update together-prod tc-h100-reserved reservation_end_time=2027-06-30T00:00:00Z"


async def test_a_change_past_a_limit_is_refused_with_the_limit_and_nothing_is_stored(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(policy_yaml=guard_policy())
    text = await answer_to(stack, DAVE, "update together-prod tc-h200-ondemand num_gpus=128")
    assert "num_gpus 128 is over together-prod's limit of 64 GPUs per cluster" in text
    nodes = await answer_to(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=8")
    assert "10 nodes is over e2e-delhi's limit of 6 nodes per cluster" in nodes
    assert await stack.runtime.store.list_requests() == []
    assert stack.together.calls("update", "PUT") == [] and stack.e2e.calls("action", "PUT") == []
    refusals = [e for e in await stack.runtime.store.list_audit(limit=10) if e.event == "refused"]
    assert {e.outcome for e in refusals} == {"limit"}


async def test_the_price_of_a_together_change_is_in_the_preview_and_the_prompt(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(policy_yaml=guard_policy())
    opened = await request(stack, DAVE, "update together-prod tc-h100-reserved num_gpus=8")
    root = stack.slack.message(opened.channel, opened.root_ts)
    prompt = stack.slack.message(opened.channel, opened.prompt_ts or "")
    assert root is not None and prompt is not None
    line = "≈ -$23.92/h: 8 \N{MULTIPLICATION SIGN} H100_SXM at $2.99, prices of "
    assert line in readable_text(root) and line in readable_text(prompt)
    assert "old" not in readable_text(root)
    home = await open_home(stack, BOB)  # waiting for Bob's approval, with its price
    assert line in json.dumps(home.blocks, ensure_ascii=False)


async def test_a_stricter_policy_refuses_at_approval_what_a_looser_one_allowed(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    opened = await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=2")
    path = stack.runtime.settings.gpuops_policy
    strict = DEMO_POLICY.replace(
        "    location: Delhi\n", "    location: Delhi\n    limits:\n      max_nodes: 3\n"
    )
    assert strict != DEMO_POLICY
    path.write_text(strict)
    assert await stack.runtime.reload_policy() == "reloaded"
    seen = len(stack.slack.ephemerals_for(BOB))
    await click(stack, opened, BOB)
    record = await wait_state(stack.runtime.store, opened.id, S.FAILED)
    assert record.result_message is not None
    assert "4 nodes is over e2e-delhi's limit of 3 nodes" in record.result_message
    told = await next_ephemeral(stack, BOB, seen)
    assert "limit of 3 nodes" in told.text
    assert stack.e2e.calls("action", "PUT") == []


async def test_two_distinct_approvers_are_needed_and_the_prompt_says_why_and_how_far(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(policy_yaml=guard_policy())
    opened = await request(stack, DAVE, DECOMMISSION)
    prompt = stack.slack.message(opened.channel, opened.prompt_ts or "")
    assert prompt is not None
    assert "decommission needs 2 approvers (approval rule of together-prod)" in prompt.text
    assert "0 of 2: none yet" in prompt.text

    seen = len(stack.slack.ephemerals_for(BOB))
    await click(stack, opened, BOB)
    recorded = await next_ephemeral(stack, BOB, seen)
    assert f"Your approval of {opened.id} is recorded: 1 of 2." in recorded.text
    await wait_reply(stack, opened, "(1 of 2)")
    prompt = stack.slack.message(opened.channel, opened.prompt_ts or "")
    assert prompt is not None and "1 of 2: <@U02BOB>" in prompt.text
    assert "approve_request" in str(prompt.blocks)  # still open
    seen += 1
    await click(stack, opened, BOB)  # the same person again counts once
    again = await next_ephemeral(stack, BOB, seen)
    assert "already approved" in again.text and "1 of 2" in again.text
    record = await wait_state(stack.runtime.store, opened.id, S.PENDING)
    assert record.approvers == [BOB] and stack.together.calls("update", "PUT") == []

    await click(stack, opened, CAROL)
    await wait_root(stack, opened, "done")
    assert len(stack.together.calls("update", "PUT")) == 1
    root = stack.slack.message(opened.channel, opened.root_ts)
    assert root is not None and "approved by <@U02BOB> and <@U03CAROL>" in readable_text(root)
    summary = await wait_reply(stack, opened, "train-h100-reserved (tc-h100-reserved)")
    assert "approved by <@U02BOB> and <@U03CAROL>" in readable_text(summary)
    trail = events(await audit_trail(stack.runtime.store, opened.id))
    assert trail.count("approval_added") == 1 and trail.count("approved") == 1


async def test_an_approver_outside_the_rules_groups_is_refused_and_nothing_is_recorded(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(policy_yaml=guard_policy())
    opened = await request(stack, DAVE, "action e2e-delhi 101 restart_cluster")
    prompt = stack.slack.message(opened.channel, opened.prompt_ts or "")
    assert prompt is not None and "from <!subteam^S0PLATFORM>" in prompt.text
    for button in ("approve_request", "deny_request"):
        seen = len(stack.slack.ephemerals_for(BOB))
        await click(stack, opened, BOB, button)
        told = await next_ephemeral(stack, BOB, seen)
        assert "you must be in" in told.text and "nothing was recorded" in told.text
    record = await wait_state(stack.runtime.store, opened.id, S.PENDING)
    assert record.approvers == []
    await click(stack, opened, CAROL)  # in S0PLATFORM: one is enough under this rule
    await wait_root(stack, opened, "done")
    assert len(stack.e2e.calls("action", "PUT")) == 1


async def test_two_approvers_at_once_on_two_replicas_both_count_and_it_is_sent_once(
    pg_database_url: str, make_stack: StackFactory
) -> None:
    stack = await make_stack(
        policy_yaml=guard_policy(), database_url=pg_database_url, instance_id="replica-a"
    )
    replica_b = await stack.start_replica("replica-b")
    for day in (12, 11, 10):  # each end earlier than the last: decommissions
        end = f"reservation_end_time=2027-06-{day}T00:00:00Z"
        opened = await request(stack, DAVE, f"update together-prod tc-h100-reserved {end}")
        await asyncio.gather(
            click(stack, opened, BOB, sender=stack.sender),
            click(stack, opened, CAROL, sender=replica_b.sender),
        )
        record = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED, S.FAILED)
        assert sorted(record.approvers) == [BOB, CAROL]
        trail = events(await audit_trail(stack.runtime.store, opened.id))
        assert trail.count("approved") == 1 and trail.count("executing") == 1
        await wait_root(stack, opened, "done" if record.state is S.SUCCEEDED else "failed")
        await wait_unlocked(stack.runtime.store, "together", "together-prod", "tc-h100-reserved")
    assert len(stack.together.calls("update", "PUT")) == 3


async def _break_glass(stack: LocalStack, opened: Opened, reason: str) -> str:
    """The requester (Alice, an admin) presses Approve and gives a break-glass reason; what
    she is told."""
    await click(stack, opened, ALICE)
    view = await stack.slack.wait_for(lambda: stack.slack.last_view_for(ALICE, open_only=True))
    assert view.callback_id == "gpu_break_glass"
    seen = len(stack.slack.ephemerals_for(ALICE))
    submitted = await stack.sender.view_submission(ALICE, view.id, {"reason": reason})
    assert submitted.status == 200 and not submitted.problems, submitted
    return (await next_ephemeral(stack, ALICE, seen)).text


async def test_break_glass_under_a_two_approver_rule_is_one_approval_of_two(
    make_stack: StackFactory, database_url: str
) -> None:
    stack = await make_stack(policy_yaml=guard_policy(), database_url=database_url)
    opened = await request(stack, ALICE, DECOMMISSION)
    reason = "reservation must end before the renewal at midnight"
    told = await _break_glass(stack, opened, reason)
    assert f"Break glass on {opened.id} counts as one approval: 1 of 2; it needs 1 more" in told
    record = await wait_state(stack.runtime.store, opened.id, S.PENDING)
    assert record.approvers == [ALICE] and stack.together.calls("update", "PUT") == []
    note = await wait_reply(stack, opened, reason)
    assert f"break glass by <@{ALICE}> · 1 of 2: needs 1 more" in note.text and reason in note.text
    prompt = stack.slack.message(opened.channel, opened.prompt_ts or "")
    assert prompt is not None and "approve_request" in str(prompt.blocks)  # still open
    assert f"break glass by <@{ALICE}> · 1 of 2: needs 1 more" in prompt.text
    mirrored = [m.text for m in stack.slack.messages.get("C0GPUAUDIT", [])]
    assert any(t.startswith(f"Break glass: <@{ALICE}>") and "1 of 2" in t for t in mirrored)
    rows = await stack.runtime.store.list_audit(request_id=opened.id)
    glass = [e for e in rows if e.event == "break_glass"]
    assert len(glass) == 1 and glass[0].outcome == "1 of 2"
    assert glass[0].detail["reason"] == reason and glass[0].actor == ALICE

    opened_views = len(stack.slack.calls_to("views.open"))
    seen = len(stack.slack.ephemerals_for(ALICE))
    await click(stack, opened, ALICE)  # the same person again: counted once, no new form
    again = await next_ephemeral(stack, ALICE, seen)
    assert "already approved" in again.text and "1 of 2" in again.text
    assert len(stack.slack.calls_to("views.open")) == opened_views
    record = await wait_state(stack.runtime.store, opened.id, S.PENDING)
    assert record.approvers == [ALICE] and stack.together.calls("update", "PUT") == []

    await click(stack, opened, BOB)
    await wait_root(stack, opened, "done")
    assert len(stack.together.calls("update", "PUT")) == 1
    root = stack.slack.message(opened.channel, opened.root_ts)
    assert root is not None
    assert f"approved by <@{ALICE}> and <@{BOB}>" in readable_text(root)
    assert "break glass" in readable_text(root)
    trail = events(await audit_trail(stack.runtime.store, opened.id))
    assert trail.count("break_glass") == 1 and trail.count("approved") == 1


async def test_break_glass_leaves_the_rules_groups_to_the_other_approvers(
    make_stack: StackFactory, database_url: str
) -> None:
    rule = "      kinds: [decommission, change_type]\n      approvers: 2\n"
    policy = guard_policy().replace(rule, rule + "      usergroups: [S0PLATFORM]\n")
    assert policy != guard_policy()
    stack = await make_stack(policy_yaml=policy, database_url=database_url)
    opened = await request(stack, ALICE, DECOMMISSION)
    told = await _break_glass(stack, opened, "the reservation ends tonight, nobody else is up")
    assert "needs 1 more from user group S0PLATFORM" in told
    prompt = stack.slack.message(opened.channel, opened.prompt_ts or "")
    assert prompt is not None
    assert f"break glass by <@{ALICE}> · 1 of 2: needs 1 more from <!subteam^S0PLATFORM>" in (
        prompt.text
    )
    seen = len(stack.slack.ephemerals_for(BOB))
    await click(stack, opened, BOB)  # an approver, but not in the rule's group
    refused = await next_ephemeral(stack, BOB, seen)
    assert "you must be in" in refused.text and "nothing was recorded" in refused.text
    record = await wait_state(stack.runtime.store, opened.id, S.PENDING)
    assert record.approvers == [ALICE] and stack.together.calls("update", "PUT") == []
    await click(stack, opened, CAROL)  # in S0PLATFORM: the second of two
    await wait_root(stack, opened, "done")
    assert len(stack.together.calls("update", "PUT")) == 1


async def test_a_break_glass_stops_counting_once_the_policy_turns_break_glass_off(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(policy_yaml=guard_policy())
    opened = await request(stack, ALICE, DECOMMISSION)
    await _break_glass(stack, opened, "reservation must end before the renewal at midnight")
    path = stack.runtime.settings.gpuops_policy
    path.write_text(guard_policy().replace("break_glass: true", "break_glass: false"))
    assert await stack.runtime.reload_policy() == "reloaded"
    seen = len(stack.slack.ephemerals_for(BOB))
    await click(stack, opened, BOB)
    counted = await next_ephemeral(stack, BOB, seen)
    assert f"Your approval of {opened.id} is recorded: 1 of 2." in counted.text  # not 2 of 2
    record = await wait_state(stack.runtime.store, opened.id, S.PENDING)
    assert record.approvers == [ALICE, BOB] and stack.together.calls("update", "PUT") == []
    await click(stack, opened, CAROL)
    await wait_root(stack, opened, "done")
    assert len(stack.together.calls("update", "PUT")) == 1


async def test_group_rules_resolve_under_an_org_wide_install(make_stack: StackFactory) -> None:
    """An org-level token (the Workflow step's org-wide install) must name the group's team:
    each lookup carries the team the click came from, so the group's member may approve."""
    stack = await make_stack(policy_yaml=guard_policy())
    stack.slack.org_install = True
    groups = stack.runtime.authorizer.groups
    assert isinstance(groups, SlackUserGroupResolver)
    groups.invalidate()  # nothing known from before the token became an org one
    opened = await request(stack, DAVE, "action e2e-delhi 101 restart_cluster")
    await click(stack, opened, CAROL)  # in S0PLATFORM, the rule's group
    await wait_root(stack, opened, "done")
    assert len(stack.e2e.calls("action", "PUT")) == 1
    lookups = stack.slack.calls_to("usergroups.users.list")
    assert lookups and all(call.args.get("team_id") == stack.slack.team_id for call in lookups)
