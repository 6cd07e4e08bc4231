"""Forms within Slack's deadlines over real HTTP against the strict stand-in (issue #10 cases
1, 2, 5, 6): forms open first, submissions are answered within 2.5 s whatever the checks wait
on, one view makes one request, error keys name blocks of the form, select changes carry the
view's hash."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import urlencode

from bot.local.demo.stack import LocalStack
from bot.local.simulators.base import Fault, FaultKind
from bot.local.slack.sender import FORM_CONTENT_TYPE
from bot.slack.usergroups import SlackUserGroupResolver
from tests.support.slack_support import blocks_json, opened_modal, provider_writes

SLOW_PROVIDER = 1.0


def _slow_providers(stack: LocalStack) -> None:
    for simulator in (stack.together, stack.e2e):
        simulator.faults.add(Fault(kind=FaultKind.LATENCY, seconds=SLOW_PROVIDER, times=-1))


def _cold_group_cache(stack: LocalStack) -> None:
    groups = stack.runtime.ops.access.authorizer.groups
    assert isinstance(groups, SlackUserGroupResolver)
    groups.invalidate()


async def test_a_form_opens_within_a_second_behind_twenty_concurrent_lists(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    _slow_providers(stack)
    lists = await asyncio.gather(
        *(stack.sender.command("U04DAVE", "C0INCIDENT", "list") for _ in range(20))
    )
    assert all(r.status == 200 and r.acked_in_time for r in lists)
    sent = time.time()
    form = await stack.sender.command(
        "U04DAVE", "C0INCIDENT", "update together-prod tc-h100-reserved"
    )
    assert form.acked_in_time
    opened = await stack.slack.wait_for(
        lambda: next(iter(stack.slack.calls_to("views.open")), None), within=5
    )
    assert opened.ok, opened.error  # the trigger was still valid
    assert opened.at - sent <= 1.0, f"views.open {opened.at - sent:.2f} s after the command"
    view = await opened_modal(stack, "U04DAVE", "gpu_update")  # filled once fetched
    assert "tc-h100-reserved" in blocks_json(view.blocks)
    await stack.slack.wait_for(lambda: len(stack.slack.response_posts) >= 20 or None, within=20)
    assert stack.slack.errors_shown == []


async def test_a_submission_behind_a_rate_limited_group_look_up_is_answered_in_time(
    sqlite_stack: LocalStack,
) -> None:
    """Case 1: a cold group cache, two 429s (Retry-After 2 s) and a 1 s provider: the form
    is answered with a "checking…" view within 2.5 s, then shows the outcome; one request,
    one PUT, even though the person pressed Submit twice."""
    stack = sqlite_stack
    await stack.sender.command("U03CAROL", "C0INCIDENT", "update together-prod tc-h200-ondemand")
    view = await opened_modal(stack, "U03CAROL", "gpu_update")
    _cold_group_cache(stack)
    stack.slack.fail("usergroups.users.list", times=2, retry_after=2)
    _slow_providers(stack)

    first, second = await asyncio.gather(
        stack.sender.view_submission("U03CAROL", view.id, {"num_gpus": "16"}),
        stack.sender.view_submission("U03CAROL", view.id, {"num_gpus": "16"}),
    )
    for answer in (first, second):
        assert answer.status == 200 and not answer.late and answer.elapsed <= 2.5, answer
        assert answer.json["response_action"] == "update" and answer.problems == ()
    assert "Checking" in blocks_json(stack.slack.views[view.id].blocks)

    told = await stack.slack.wait_for(
        lambda: [e for e in stack.slack.ephemerals_for("U03CAROL")] or None, within=20
    )
    await stack.slack.wait_for(lambda: len(stack.slack.ephemerals_for("U03CAROL")) >= 2, within=10)
    texts = [e.text for e in stack.slack.ephemerals_for("U03CAROL")]
    assert sum("already submitted" in t for t in texts) == 1, texts
    assert any("CR-" in t for t in texts), told
    outcome = await stack.slack.wait_for(
        lambda: "CR-" in blocks_json(stack.slack.views[view.id].blocks) or None, within=10
    )
    assert outcome and stack.slack.errors_shown == []
    assert len(await stack.runtime.store.list_requests()) == 1
    await stack.runtime.workflow.drain()
    assert len(stack.together.calls("update", "PUT")) == 1
    assert stack.slack.spec_problems == []  # e.g. no user id written bare in a fallback


async def test_slow_checks_that_find_a_problem_show_the_form_again_with_its_values(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    await stack.sender.command("U03CAROL", "C0INCIDENT", "update together-prod tc-h200-ondemand")
    view = await opened_modal(stack, "U03CAROL", "gpu_update")
    _cold_group_cache(stack)
    stack.slack.delay("usergroups.users.list", 4.0)
    answer = await stack.sender.view_submission("U03CAROL", view.id, {"num_gpus": "12"})
    stack.slack.delay("usergroups.users.list", 0)
    assert answer.elapsed <= 2.5 and answer.json["response_action"] == "update"

    def again() -> dict[str, Any] | None:
        shown = stack.slack.views[view.id]
        return (
            shown.view
            if shown.view.get("submit") and "multiple of 8" in json.dumps(shown.view)
            else None
        )

    form = await stack.slack.wait_for(again, within=15)
    typed = next(b for b in form["blocks"] if b.get("block_id") == "num_gpus")
    assert typed["element"]["initial_value"] == "12"
    assert await stack.runtime.store.list_requests() == [] and provider_writes(stack) == []


async def test_the_same_view_submitted_twice_at_once_makes_one_request_and_one_put(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    await stack.sender.command("U04DAVE", "C0INCIDENT", "update together-prod tc-h100-reserved")
    view = await opened_modal(stack, "U04DAVE", "gpu_update")
    answers = await asyncio.gather(
        *(
            stack.sender.view_submission("U04DAVE", view.id, {"num_preemptible_gpus": "8"})
            for _ in range(2)
        )
    )
    assert all(a.status == 200 and not a.late for a in answers)
    await stack.slack.wait_for(lambda: len(stack.slack.ephemerals_for("U04DAVE")) >= 2, within=10)
    texts = [e.text for e in stack.slack.ephemerals_for("U04DAVE")]
    assert sum("already submitted" in t for t in texts) == 1, texts
    assert len(await stack.runtime.store.list_requests()) == 1
    await stack.runtime.workflow.drain()
    assert len(stack.together.calls("update", "PUT")) == 1


async def test_an_unreadable_submission_names_a_block_of_that_form(
    sqlite_stack: LocalStack,
) -> None:
    """Case 6: Slack rejects a whole errors answer that names a block the form lacks."""
    stack = sqlite_stack
    await stack.sender.command("U04DAVE", "C0INCIDENT", "action e2e-delhi 101")
    view = await opened_modal(stack, "U04DAVE", "gpu_action")
    unreadable = {**view.as_slack(), "private_metadata": "x" * 3001}
    payload = {
        "type": "view_submission",
        "team": {"id": stack.sender.team_id},
        "user": {"id": "U04DAVE"},
        "api_app_id": "A0GPUOPS",
        "trigger_id": "1.2.3",
        "view": unreadable,
    }
    body = urlencode({"payload": json.dumps(payload)})
    answer = await stack.sender.post(body, FORM_CONTENT_TYPE)
    assert answer.json["response_action"] == "errors"
    blocks = {b.get("block_id") for b in view.blocks if b.get("type") == "input"}
    assert set(answer.json["errors"]) <= blocks and "action" in answer.json["errors"]


async def test_two_quick_select_changes_cannot_overwrite_each_other(
    sqlite_stack: LocalStack,
) -> None:
    """Case 6: views.update carries the hash of the view the choice was made on; the slower
    of two choices made on the same view gets hash_conflict and leaves the form alone."""
    stack = sqlite_stack
    await stack.sender.command("U04DAVE", "C0INCIDENT", "action e2e-delhi 101")
    view = await opened_modal(stack, "U04DAVE", "gpu_action")
    before, chosen_on = len(stack.slack.calls_to("views.update")), view.hash
    await asyncio.gather(
        *(
            stack.sender.view_block_action(
                "U04DAVE", view.id, action_id="action", block_id="action", selected_value=choice
            )
            for choice in ("scale_cluster", "attach_ip")
        )
    )
    await stack.slack.wait_for(
        lambda: len(stack.slack.calls_to("views.update")) >= before + 2 or None, within=10
    )
    updates = stack.slack.calls_to("views.update")[before:]
    assert all(c.args.get("hash") == chosen_on for c in updates)
    assert sorted(str(c.error) for c in updates) == ["None", "hash_conflict"]
    shown = stack.slack.views[view.id]
    chosen = next(b for b in shown.blocks if b.get("block_id") == "action")
    choice = chosen["element"]["initial_option"]["value"]
    winner = next(c for c in updates if c.ok)
    landed = next(b for b in winner.args["view"]["blocks"] if b.get("block_id") == "action")
    assert choice == landed["element"]["initial_option"]["value"]  # the form is one choice's
