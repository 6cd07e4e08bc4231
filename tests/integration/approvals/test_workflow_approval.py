"""Change requests end to end over real HTTP, on SQLite (the refusals on PostgreSQL too):
request → approval prompt → decision (approve, deny, cancel, refusals, expiry, stale preview,
break glass) → one provider call → result and cluster summary in the thread → audit trail
(SPEC §3-§5). The decision logic on both backends, and its variants (every refusal, a click
past the deadline, a viewer in another channel), run on the core harness:
tests/core/test_decisions.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.core.store import RequestState as S
from bot.local.demo.stack import DEMO_POLICY, LocalStack
from tests.conftest import StackFactory
from tests.support.slack_support import roots
from tests.support.workflow_kit import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL,
    DAVE,
    DECISION_BUTTONS,
    ERIN,
    Opened,
    audit_trail,
    buttons,
    click,
    deny,
    events,
    next_ephemeral,
    readable_text,
    request,
    slack_notifier,
    thread_texts,
    wait_mirror,
    wait_reply,
    wait_root,
    wait_state,
)

SCALE_101 = "action e2e-delhi 101 scale_cluster additional_nodes=2"

_BOB_GRANT = '  - users: [U02BOB]\n    projects: ["*"]\n    role: approver\n'
assert _BOB_GRANT in DEMO_POLICY and "break_glass: true" in DEMO_POLICY
# Bob approves only in #incident, and nobody may approve their own request.
STRICT_POLICY = DEMO_POLICY.replace(
    _BOB_GRANT, _BOB_GRANT + "    channels: [C0INCIDENT]\n"
).replace("break_glass: true", "break_glass: false")


@pytest.fixture
async def stack(sqlite_stack: LocalStack) -> LocalStack:
    """These flows over HTTP on SQLite: what they show does not depend on the backend;
    their logic runs on SQLite and PostgreSQL on the core harness (tests/core/)."""
    return sqlite_stack


def root_states(stack: LocalStack, opened: Opened) -> list[str]:
    root = stack.slack.message(opened.channel, opened.root_ts)
    assert root is not None
    return [v.text.split("]", 1)[0].lstrip("[") for v in root.versions]


async def test_approved_scale_cluster_runs_once_with_the_whole_story_in_the_thread(
    stack: LocalStack,
) -> None:
    opened = await request(stack, DAVE, SCALE_101)
    root = stack.slack.message(CHANNEL, opened.root_ts)
    prompt = stack.slack.message(CHANNEL, opened.prompt_ts or "")
    assert root is not None and prompt is not None
    assert root.text.startswith("[pending approval]") and opened.id in root.text
    assert "scale_cluster: 2 → 4 nodes" in root.text and "<@U04DAVE>" in readable_text(root)
    assert prompt.thread_ts == opened.root_ts
    assert buttons(prompt) == dict.fromkeys(DECISION_BUTTONS, opened.id)
    assert stack.e2e.calls("action", "PUT") == []

    slack_notifier(stack).running_after = 3600  # never shown running: it is quick
    await click(stack, opened, BOB)
    await wait_root(stack, opened, "done")
    await wait_mirror(stack, opened, "Change done")

    puts = stack.e2e.calls("action", "PUT")
    assert [p.body for p in puts] == [{"action": "scale_cluster", "additional_nodes": 2}]
    assert puts[0].path.endswith("/distributed_jobs_v2/cluster/101/")
    assert stack.e2e.clusters[101].nodes == 4
    record = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert record.decided_by == BOB and not record.break_glass
    assert root_states(stack, opened) == ["pending approval", "approved", "done"]
    summary = await wait_reply(stack, opened, "train-h100-a (101)")
    assert "4 nodes" in summary.text and (summary.blocks or [{}])[0].get("type") == "header"
    assert record.summary_ts is None  # polling is off: no follow-up edits it, none stored
    who = readable_text(summary)
    assert "requested by <@U04DAVE>" in who and "approved by <@U02BOB>" in who
    texts = thread_texts(stack, opened)
    assert opened.prompt_ts is not None
    prompt = stack.slack.message(opened.channel, opened.prompt_ts)
    assert prompt is not None and prompt.versions[0].text.startswith(
        f"Approval needed for {opened.id}"
    )
    # once decided, the prompt shows the decision instead of buttons
    assert texts[0] == f"Approval for {opened.id}: approved" and buttons(prompt) == {}
    assert any("Approved by <@U02BOB>" in t for t in texts)
    assert any("Adding 2 node(s)" in t for t in texts)  # the provider's own result message
    trail = await audit_trail(stack.runtime.store, opened.id)
    assert trail == [
        (DAVE, "requested", "pending"),
        (BOB, "approved", "approved"),
        (BOB, "executing", None),
        (DAVE, "result", "succeeded"),
    ]
    # the notify channel mirrors the request (and, above, its result)
    await wait_mirror(stack, opened, "Change requested")
    # a late click is told who decided; nothing runs again
    seen = len(stack.slack.ephemerals_for(CAROL))
    await click(stack, opened, CAROL)
    late = await next_ephemeral(stack, CAROL, seen)
    assert f"{opened.id} was already approved by" in late.text and "U02BOB" in late.text
    assert "(done)" in late.text and len(stack.e2e.calls("action", "PUT")) == 1


async def _refused(
    stack: LocalStack,
    opened: Opened,
    user: str,
    why: str,
    *,
    channel: str | None = None,
    action_id: str = "approve_request",
) -> None:
    seen = len(stack.slack.ephemerals_for(user))
    await click(stack, opened, user, action_id, channel=channel)
    whisper = await next_ephemeral(stack, user, seen)
    assert whisper.source == "chat.postEphemeral" and whisper.user == user
    assert why in whisper.text, whisper.text
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.PENDING and record.decided_by is None


async def test_refused_approvals_change_nothing_and_say_why(
    database_url: str, make_stack: StackFactory
) -> None:
    """Two refusals whispered over HTTP; every refusal (role, self-approval, channel grant)
    on SQLite and PostgreSQL: tests/core/test_decisions.py."""
    stack = await make_stack(database_url=database_url, policy_yaml=STRICT_POLICY)
    by_dave = await request(stack, DAVE, SCALE_101)
    await _refused(
        stack, by_dave, DAVE, "you are operator on e2e-delhi; approving a request needs approver"
    )
    by_alice = await request(stack, ALICE, "action e2e-delhi 104 scale_cluster additional_nodes=1")
    await _refused(stack, by_alice, ALICE, f"you requested {by_alice.id}; another approver")
    assert stack.slack.calls_to("views.open") == []  # break glass is off: no modal
    in_random = await request(
        stack, DAVE, "action e2e-delhi 105 restart_workers", channel="C0RANDOM"
    )
    await _refused(stack, in_random, BOB, "your grant on e2e-delhi holds only in")
    assert "C0INCIDENT" in stack.slack.ephemerals_for(BOB)[-1].text
    assert stack.e2e.calls("action", "PUT") == []
    refusals = [
        (actor, outcome)
        for opened in (by_dave, by_alice, in_random)
        for actor, event, outcome in await audit_trail(stack.runtime.store, opened.id)
        if event == "refused"
    ]
    assert refusals == [(DAVE, "not_authorized"), (ALICE, "self_approval"), (BOB, "not_authorized")]
    # the refusals left every request approvable by the right person
    await click(stack, by_dave, CAROL)
    await wait_state(stack.runtime.store, by_dave.id, S.SUCCEEDED)
    assert len(stack.e2e.calls("action", "PUT")) == 1


async def test_deny_closes_the_request_and_a_late_click_is_told_who_decided(
    stack: LocalStack,
) -> None:
    opened = await request(stack, DAVE, SCALE_101)
    await deny(stack, opened, BOB, "not during the <@U0EVIL> freeze")
    await wait_root(stack, opened, "denied")
    record = await wait_state(stack.runtime.store, opened.id, S.DENIED)
    assert record.decided_by == BOB and record.decision_note == "not during the <@U0EVIL> freeze"
    assert "by <@U02BOB>" in readable_text(stack.slack.message(CHANNEL, opened.root_ts))  # type: ignore[arg-type]
    # the reason is in the thread (escaped), the audit and the notify channel
    note = await wait_reply(stack, opened, "Denied by <@U02BOB>.")
    assert "Reason: not during the &lt;@U0EVIL&gt; freeze" in note.text
    mirrored = await wait_mirror(stack, opened, "Change denied: not during the")
    assert "<@U0EVIL>" not in mirrored.text
    [denied] = [
        e for e in await stack.runtime.store.list_audit(request_id=opened.id) if e.event == "denied"
    ]
    assert denied.detail["reason"] == "not during the <@U0EVIL> freeze"
    seen = len(stack.slack.ephemerals_for(CAROL))
    await click(stack, opened, CAROL)
    late = await next_ephemeral(stack, CAROL, seen)
    assert f"{opened.id} was already denied by" in late.text and "U02BOB" in late.text
    assert stack.e2e.calls("action", "PUT") == []
    assert events(await audit_trail(stack.runtime.store, opened.id)) == [
        "requested",
        "denied",
        "refused",
    ]


async def test_a_deny_without_a_reason_and_one_refused_before_its_form(
    stack: LocalStack,
) -> None:
    opened = await request(stack, DAVE, SCALE_101)
    await _refused(stack, opened, ERIN, "you are viewer on e2e-delhi", action_id="deny_request")
    assert stack.slack.open_views_for(ERIN) == []  # refused at the click: no form for nothing
    await deny(stack, opened, BOB)
    await wait_reply(stack, opened, "Denied by <@U02BOB>.")
    record = await wait_state(stack.runtime.store, opened.id, S.DENIED)
    assert record.decision_note is None
    assert not any("Reason:" in t for t in thread_texts(stack, opened))


async def test_cancel_by_the_requester_or_an_admin_but_not_another_operator(
    stack: LocalStack,
) -> None:
    by_dave = await request(stack, DAVE, SCALE_101)
    await click(stack, by_dave, DAVE, "cancel_request")
    await wait_root(stack, by_dave, "cancelled")
    await wait_reply(stack, by_dave, "Cancelled by <@U04DAVE>.")
    assert (await wait_state(stack.runtime.store, by_dave.id, S.CANCELLED)).decided_by == DAVE

    again = await request(stack, DAVE, "action e2e-delhi 103 scale_cluster additional_nodes=1")
    await click(stack, again, ALICE, "cancel_request")  # an admin may cancel anyone's
    await wait_root(stack, again, "cancelled")
    assert (await wait_state(stack.runtime.store, again.id, S.CANCELLED)).decided_by == ALICE

    by_alice = await request(stack, ALICE, "action e2e-delhi 104 scale_cluster additional_nodes=1")
    for other in (DAVE, BOB):  # an operator, and an approver who is not an admin
        seen = len(stack.slack.ephemerals_for(other))
        await click(stack, by_alice, other, "cancel_request")
        refusal = await next_ephemeral(stack, other, seen)
        assert f"or an admin of e2e-delhi can cancel {by_alice.id}" in refusal.text
    assert (await stack.runtime.store.get_request(by_alice.id)).state is S.PENDING  # type: ignore[union-attr]

    seen = len(stack.slack.ephemerals_for(BOB))
    await click(stack, by_dave, BOB)  # approving a cancelled request
    late = await next_ephemeral(stack, BOB, seen)
    assert f"{by_dave.id} was already cancelled by" in late.text
    assert stack.e2e.calls("action", "PUT") == []


async def test_an_undecided_request_expires_and_cannot_be_approved_after(
    stack: LocalStack,
) -> None:
    workflow = stack.runtime.workflow
    opened = await request(stack, DAVE, SCALE_101)
    assert await workflow.expire_due() == 0  # not yet due
    workflow.clock = lambda: datetime.now(UTC) + timedelta(minutes=31)
    assert await workflow.expire_due() == 1
    assert await workflow.expire_due() == 0  # once
    await wait_root(stack, opened, "expired")
    assert (await wait_state(stack.runtime.store, opened.id, S.EXPIRED)).decided_by is None
    note = await wait_reply(stack, opened, "Expired: nobody approved")
    assert "within 30 minutes. Nothing was changed." in note.text
    seen = len(stack.slack.ephemerals_for(BOB))
    await click(stack, opened, BOB)
    late = await next_ephemeral(stack, BOB, seen)
    assert f"{opened.id} is already expired" in late.text
    assert stack.e2e.calls("action", "PUT") == []
    assert events(await audit_trail(stack.runtime.store, opened.id)) == [
        "requested",
        "expired",
        "refused",
    ]


async def test_every_final_state_mentions_the_requester_unless_they_ended_it(
    stack: LocalStack,
) -> None:
    """The bot posts the root, so Slack notifies nobody of a note in its thread unless the
    note mentions them: a denial, an expiry, an admin's cancel and a result reach the
    requester by a mention; their own cancel does not ping them."""
    dave = "<@U04DAVE>"
    denied = await request(stack, DAVE, SCALE_101)
    await deny(stack, denied, BOB, "not now")
    note = await wait_reply(stack, denied, "Denied by <@U02BOB>.")
    assert note.text.startswith(dave) and readable_text(note).startswith(dave)

    cancelled = await request(stack, DAVE, SCALE_101)
    await click(stack, cancelled, ALICE, "cancel_request")
    note = await wait_reply(stack, cancelled, "Cancelled by <@U01ALICE>.")
    assert note.text.startswith(dave)

    own = await request(stack, DAVE, SCALE_101)
    await click(stack, own, DAVE, "cancel_request")
    note = await wait_reply(stack, own, "Cancelled by <@U04DAVE>.")
    assert note.text.startswith(":heavy_multiplication_x:")  # not pinged by their own

    expired = await request(stack, DAVE, SCALE_101)
    workflow = stack.runtime.workflow
    workflow.clock = lambda: datetime.now(UTC) + timedelta(minutes=31)
    assert await workflow.expire_due() == 1
    note = await wait_reply(stack, expired, "Expired: nobody approved")
    assert note.text.startswith(dave)


async def test_a_default_rule_prompt_mentions_the_eligible_approvers(
    stack: LocalStack,
) -> None:
    """A prompt under the default rule pinged nobody; it mentions the approvers the grants
    name (users and their groups as Slack group mentions), never the requester."""
    opened = await request(stack, DAVE, SCALE_101)
    assert opened.prompt_ts is not None
    prompt = stack.slack.message(CHANNEL, opened.prompt_ts)
    assert prompt is not None
    for said in (prompt.text, readable_text(prompt)):
        assert "Asking " in said and "<@U02BOB>" in said and "<!subteam^S0PLATFORM>" in said
        assert "<@U04DAVE>" not in said.split("Asking ")[1]


async def test_a_cluster_changed_since_the_preview_is_refused_as_stale(
    stack: LocalStack,
) -> None:
    e2e_request = await request(
        stack, DAVE, "action e2e-delhi 104 scale_cluster additional_nodes=1"
    )
    stack.e2e.clusters[104].nodes = 3  # someone scaled it in the provider's console
    seen = len(stack.slack.ephemerals_for(BOB))
    await click(stack, e2e_request, BOB)
    whisper = await next_ephemeral(stack, BOB, seen)
    stale = "stale at approval: the cluster changed since the preview"
    assert f"{e2e_request.id} failed — {stale}" in whisper.text
    note = await wait_reply(stack, e2e_request, stale)
    assert "no_of_nodes was 1, now 3" in note.text
    root = await wait_root(stack, e2e_request, "failed")
    # one word for one outcome: the thread says what bob was told, and never "approved by"
    shown = readable_text(root)
    assert "*failed* · stale at approval · <@U02BOB> pressed Approve" in shown
    assert "approved by" not in shown
    # the notify channel's copy does not stay "pending approval"
    mirrored = await wait_mirror(stack, e2e_request, "Change failed — stale at approval")
    assert "*failed* · stale at approval" in readable_text(mirrored)
    # … and neither does its first copy, edited to the final state as the root is
    first = await wait_mirror(stack, e2e_request, "Change requested")
    assert "*failed* · stale at approval" in readable_text(first)
    assert "pending approval" not in readable_text(first)
    seen = len(stack.slack.ephemerals_for(CAROL))
    await click(stack, e2e_request, CAROL)
    late = await next_ephemeral(stack, CAROL, seen)
    assert f"{e2e_request.id} already failed, stale at approval" in late.text

    together_request = await request(
        stack, DAVE, "update together-prod tc-h100-reserved num_gpus=8"
    )  # a scale-down: needs approval
    stack.together.clusters["tc-h100-reserved"]["num_gpus"] = 24
    await click(stack, together_request, CAROL)
    note = await wait_reply(stack, together_request, "stale at approval:")
    assert "num_gpus was 16, now 24" in note.text
    await wait_root(stack, together_request, "failed")

    for opened in (e2e_request, together_request):
        record = await wait_state(stack.runtime.store, opened.id, S.FAILED)
        assert record.decision_note == "stale"
        trail = await audit_trail(stack.runtime.store, opened.id)
        assert ("refused", "stale") in [t[1:] for t in trail]
    assert stack.e2e.calls("action", "PUT") == [] and stack.together.calls("update", "PUT") == []


async def test_a_second_request_on_a_cluster_is_told_of_the_first(stack: LocalStack) -> None:
    first = await request(stack, DAVE, SCALE_101)
    seen = len(stack.slack.ephemerals_for(BOB))
    second = await request(stack, BOB, "action e2e-delhi 101 restart_workers")
    told = stack.slack.ephemerals_for(BOB)[seen].text
    beside = f"{first.id} (pending approval) is also open on train-h100-a (101)"
    assert beside in told and "fails as stale at approval if the first changed" in told
    note = await wait_reply(stack, second, beside)  # the approvers read it in the thread
    assert note.thread_ts == second.root_ts
    assert not any("also open" in t for t in thread_texts(stack, first))  # the first was alone


async def test_a_second_restart_of_a_cluster_is_refused_naming_the_first(
    stack: LocalStack,
) -> None:
    """Two restart_workers on one cluster both ran (the re-check at approval cannot see a
    restart): the second requester is told which request already asks for it, and nothing
    is posted in the channel for it."""
    first = await request(stack, DAVE, "action e2e-delhi 101 restart_workers")
    posted = len(roots(stack, CHANNEL))
    seen = len(stack.slack.ephemerals_for(ALICE))
    result = await stack.sender.command(ALICE, CHANNEL, "action e2e-delhi 101 restart_workers")
    assert result.status == 200 and result.acked_in_time, result
    told = (await next_ephemeral(stack, ALICE, seen)).text
    assert f"{first.id} already asks for this on train-h100-a (101)" in told
    assert "(pending approval)" in told and "Approve or cancel it" in told
    assert len(roots(stack, CHANNEL)) == posted
    await click(stack, first, BOB)
    await wait_state(stack.runtime.store, first.id, S.SUCCEEDED)
    assert len(stack.e2e.calls("action", "PUT")) == 1


async def test_break_glass_lets_an_admin_approve_their_own_with_a_reason(
    stack: LocalStack,
) -> None:
    opened = await request(stack, ALICE, "action e2e-delhi 103 scale_cluster additional_nodes=1")
    await click(stack, opened, ALICE)
    view = await stack.slack.wait_for(lambda: stack.slack.last_view_for(ALICE, open_only=True))
    assert view.callback_id == "gpu_break_glass"
    assert (await stack.runtime.store.get_request(opened.id)).state is S.PENDING  # type: ignore[union-attr]
    assert stack.e2e.calls("action", "PUT") == []

    reason = "GPU node wedged during the incident, no approver awake"
    submitted = await stack.sender.view_submission(ALICE, view.id, {"reason": reason})
    assert submitted.status == 200 and not submitted.problems
    await wait_root(stack, opened, "done")
    record = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert record.break_glass and record.decided_by == ALICE and record.decision_note == reason
    assert [p.body for p in stack.e2e.calls("action", "PUT")] == [
        {"action": "scale_cluster", "additional_nodes": 1}
    ]
    announced = await wait_reply(stack, opened, "Break glass")
    assert reason in announced.text and f"Break glass: <@{ALICE}> approved" in announced.text
    audit_channel = [m.text for m in stack.slack.messages.get("C0GPUAUDIT", [])]
    assert any(t.startswith("Break glass") and reason in t for t in audit_channel)
    approved = [
        e
        for e in await stack.runtime.store.list_audit(request_id=opened.id)
        if e.event == "approved"
    ]
    assert len(approved) == 1 and approved[0].detail["break_glass"] is True
    assert approved[0].detail["reason"] == reason


async def test_audit_trail_is_shown_to_admins_only(stack: LocalStack) -> None:
    opened = await request(stack, DAVE, SCALE_101)
    await deny(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, S.DENIED)

    seen = len(stack.slack.ephemerals_for(ALICE))
    await stack.sender.command(ALICE, CHANNEL, "audit e2e-delhi")
    shown = await next_ephemeral(stack, ALICE, seen)
    assert shown.source == "response_url"
    text = readable_text(shown)
    assert f"*denied* `{opened.id}` e2e-delhi/101 denied" in text
    assert f"*requested* `{opened.id}` e2e-delhi/101 pending" in text

    for user, command, why in (
        (BOB, "audit", "reading the audit trail needs the admin role"),
        (BOB, "audit e2e-delhi", "you are approver on e2e-delhi"),
        (DAVE, "audit", "reading the audit trail needs the admin role"),
    ):
        seen = len(stack.slack.ephemerals_for(user))
        await stack.sender.command(user, CHANNEL, command)
        refused = await next_ephemeral(stack, user, seen)
        assert why in refused.text and opened.id not in refused.text
