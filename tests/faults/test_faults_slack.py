"""Slack-side faults at each step of a change: Slack Web API errors (``ratelimited`` with
Retry-After 0 or 1, ``not_in_channel``, ``channel_not_found``, HTTP 500) on the root post, the
approval prompt, the notify-channel mirror, the root edits, the decision note, the result (with
the summary); on ephemerals and on ``views.open`` / ``views.update``.

Whatever Slack refuses, the change is never lost half-way nor run twice (PUTs counted at the
provider, one request in the store, in the state it should be), and the person is told what
can be told: ephemerally through the command's response_url, or else the audit trail says so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import pytest

from bot.core.store import ChangeRequestRecord, RequestState
from bot.local.demo.stack import DEMO_POLICY, LocalStack
from bot.local.slack.models import FakeEvent, MessageEdited, MessagePosted
from bot.local.slack.server import SlackFault
from bot.slack.render.forms import break_glass_modal
from tests.support.reliability import (
    AUDIT_CHANNEL,
    E2E_SCALE,
    FAST,
    INCIDENT,
    OPERATOR,
    TOGETHER_SCALE_UP,
    approval_prompt,
    click,
    command,
    newest_request,
    settle,
    thread_texts,
    wait_request,
    wait_terminal,
)
from tests.support.watch_kit import WATCH_POLICY, decisions_sent, pending_remediation, watched_stack
from tests.support.workflow_kit import buttons, next_ephemeral

S = RequestState
StackFactory = Callable[..., Awaitable[LocalStack]]
When = Callable[[FakeEvent], bool] | None


@dataclass(frozen=True)
class SlackError:
    name: str
    error: str
    advice: str  # what the person reads about it
    times: int = 1
    status: int | None = None
    retry_after: int | None = None
    recovers: bool = False  # slack_sdk's rate-limit retries get through

    def arm(self, stack: LocalStack, method: str, *, persistent: bool = False) -> SlackFault:
        return stack.slack.fail(
            method,
            self.error,
            times=-1 if persistent else self.times,
            status=self.status,
            retry_after=self.retry_after,
        )


ERRORS = [
    # Three 429s in a row outlast slack_sdk's two retries.
    SlackError("ratelimited", "ratelimited", "rate-limiting", times=3, retry_after=0),
    SlackError("not_in_channel", "not_in_channel", "I'm not a member"),
    SlackError("channel_not_found", "channel_not_found", "I can't see"),
    SlackError("http_500", "internal_error", "(internal_error)", status=500),
]
RECOVERING = SlackError(
    "ratelimited_once", "ratelimited", "", times=1, retry_after=1, recovers=True
)


def posted(channel: str, *, reply: bool, contains: str = "") -> Callable[[FakeEvent], bool]:
    def match(event: FakeEvent) -> bool:
        return (
            isinstance(event, MessagePosted)
            and event.message.channel == channel
            and event.message.is_reply == reply
            and contains in event.message.text
        )

    return match


def root_edited(state_word: str) -> Callable[[FakeEvent], bool]:
    def match(event: FakeEvent) -> bool:
        return isinstance(event, MessageEdited) and event.message.text.startswith(f"[{state_word}]")

    return match


def arm_on(stack: LocalStack, when: When, arm: Callable[[], SlackFault]) -> list[SlackFault]:
    """Arm a fault now (``when`` is None) or the moment an event matches ``when``."""
    armed: list[SlackFault] = []
    if when is None:
        armed.append(arm())
        return armed

    def callback(event: FakeEvent) -> None:
        if not armed and when(event):
            armed.append(arm())
            unsubscribe()

    unsubscribe = stack.slack.subscribe(callback)
    return armed


@dataclass(frozen=True)
class Step:
    flow: Literal["together", "e2e"]
    name: str
    method: str
    when: When
    persistent: bool = False  # every call of the method fails from then on


STEPS = [
    # A change that runs at once is mirrored once, when it has ended.
    Step("together", "root", "chat.postMessage", None),
    Step("together", "root_edits", "chat.update", None, persistent=True),
    # The result and the cluster summary are one message.
    Step("together", "result", "chat.postMessage", root_edited("done")),
    Step(
        "together",
        "mirror_done",
        "chat.postMessage",
        posted(INCIDENT, reply=True, contains="Together accepted"),
    ),
    Step("e2e", "root", "chat.postMessage", None),
    Step("e2e", "prompt", "chat.postMessage", posted(INCIDENT, reply=False)),
    Step(
        "e2e",
        "mirror_requested",
        "chat.postMessage",
        posted(INCIDENT, reply=True, contains="Approval needed"),
    ),
    Step("e2e", "root_edits", "chat.update", None, persistent=True),
    Step("e2e", "approved_note", "chat.postMessage", root_edited("approved")),
    Step("e2e", "result", "chat.postMessage", root_edited("done")),
    Step(
        "e2e", "mirror_done", "chat.postMessage", posted(INCIDENT, reply=True, contains="Adding 2")
    ),
]
# Without the root message or the approval prompt there is no thread to approve in: the
# request is withdrawn before anything is sent.
WITHDRAWN_STEPS = {"root", "prompt"}


async def run_flow(stack: LocalStack, flow: str) -> tuple[str, ChangeRequestRecord]:
    """Request the flow's change (and approve it when it waits); the command's reply and
    the request as it ends."""
    reply = await command(stack, TOGETHER_SCALE_UP if flow == "together" else E2E_SCALE)
    record = await newest_request(stack)
    assert record is not None
    if record.state is S.PENDING:
        await click(stack, record.id)
    record = await wait_terminal(stack, record.id)
    await settle(stack)
    return reply.text, record


def provider_puts(stack: LocalStack, flow: str) -> int:
    sim = stack.together if flow == "together" else stack.e2e
    return len(sim.calls(None, "PUT"))


async def assert_once(stack: LocalStack, flow: str, record: ChangeRequestRecord) -> None:
    """One request in the store; one root message for it; the change sent once or never."""
    assert len(await stack.runtime.store.list_requests(limit=100)) == 1
    roots = [
        m for m in stack.slack.messages.get(INCIDENT, []) if not m.is_reply and record.id in m.text
    ]
    assert len(roots) <= 1
    sent = provider_puts(stack, flow)
    assert sent == (1 if record.state is S.SUCCEEDED else 0), (record.state, sent)
    if flow == "together":
        expected = 16 if record.state is S.SUCCEEDED else 8
        assert stack.together.clusters["tc-h200-ondemand"]["num_gpus"] == expected
    else:
        assert stack.e2e.clusters[101].nodes == (4 if record.state is S.SUCCEEDED else 2)


# slack_sdk sleeps Retry-After plus up to a second of jitter before each retry, so the
# rate-limit cells (about 1-2 s each) cover the steps whose failure changes the outcome or
# the message: the root post, the approval prompt and the result line; the recovering kind
# (one 429, then through) the first post of each flow.
RATE_LIMITED = {
    "ratelimited": {"together-root", "e2e-root", "e2e-prompt", "together-result"},
    "ratelimited_once": {"together-root", "e2e-prompt"},
}
CELLS = [
    pytest.param(step, error, id=f"{step.flow}-{step.name}-{error.name}")
    for step in STEPS
    for error in [*ERRORS, RECOVERING]
    if f"{step.flow}-{step.name}" in RATE_LIMITED.get(error.name, {f"{step.flow}-{step.name}"})
]


@pytest.mark.parametrize(("step", "error"), CELLS)
async def test_slack_fault_at_each_step(
    make_stack: StackFactory, step: Step, error: SlackError
) -> None:
    stack = await make_stack(**FAST)
    await check_step(stack, step, error)


async def check_step(stack: LocalStack, step: Step, error: SlackError) -> None:
    armed = arm_on(
        stack, step.when, lambda: error.arm(stack, step.method, persistent=step.persistent)
    )
    reply, record = await run_flow(stack, step.flow)
    assert armed, "the step was never reached"
    failed_calls = [c for c in stack.slack.calls_to(step.method) if not c.ok]
    assert failed_calls and all(c.error == error.error for c in failed_calls)
    await assert_once(stack, step.flow, record)
    audit = await stack.runtime.store.list_audit(request_id=record.id, limit=100)
    events = [e.event for e in audit]

    if error.recovers:  # slack_sdk waited out Retry-After and the post went through
        assert record.state is S.SUCCEEDED
        assert len(failed_calls) == 1
        assert any("Adding 2" in t or "accepted" in t for t in thread_texts(stack, record))
        return

    if step.name in WITHDRAWN_STEPS:
        assert record.state is S.CANCELLED, record
        assert "withdrawn" in events
        assert "Nothing was changed" in reply and record.id in reply, reply
        assert error.advice in reply, reply
        return

    assert record.state is S.SUCCEEDED, record
    assert "result" in events
    result = next(e for e in audit if e.event == "result")
    assert result.outcome == "succeeded"
    if step.name.startswith("mirror"):
        assert "mirror_failed" in events
        mirrored = [m.text for m in stack.slack.messages.get(AUDIT_CHANNEL, [])]
        # the other of the two mirror posts; a change that ran at once had only the one
        assert len(mirrored) == (1 if step.flow == "e2e" else 0), mirrored
    if step.name == "result":
        # The thread lacks the result line; the root message and the command's answer
        # (when there is no approval) still say how it went.
        root = stack.slack.message(INCIDENT, record.root_ts or "")
        assert root is not None and root.text.startswith("[done]")
    if step.flow == "together":
        # The requester's answer says how it went, whatever happened in the channel.
        assert record.id in reply and "done" in reply, reply


async def test_the_bot_removed_from_the_channel_mid_change_runs_it_once_and_says_so(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(**FAST)

    def kick(event: FakeEvent) -> None:
        if posted(INCIDENT, reply=False)(event):
            stack.slack.set_bot_member(INCIDENT, False)

    stack.slack.subscribe(kick)
    reply, record = await run_flow(stack, "together")
    assert record.state is S.SUCCEEDED
    await assert_once(stack, "together", record)
    # Nothing more reached the channel after the root; the requester still learns the outcome.
    assert thread_texts(stack, record) == []
    assert record.id in reply and "done" in reply and "Together accepted" in reply, reply
    audit = await stack.runtime.store.list_audit(request_id=record.id, limit=100)
    assert [e.outcome for e in audit if e.event == "result"] == ["succeeded"]


async def test_the_bot_removed_before_the_approval_prompt_withdraws_the_request(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(**FAST)

    def kick(event: FakeEvent) -> None:
        if posted(INCIDENT, reply=False)(event):
            stack.slack.set_bot_member(INCIDENT, False)

    stack.slack.subscribe(kick)
    reply, record = await run_flow(stack, "e2e")
    assert record.state is S.CANCELLED
    await assert_once(stack, "e2e", record)
    assert "withdrawn" in reply and "Invite me" in reply, reply


# -- ephemerals and modals -------------------------------------------------------------


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: e.name)
async def test_a_refusal_whisper_falls_back_to_the_response_url(
    make_stack: StackFactory, error: SlackError
) -> None:
    stack = await make_stack(**FAST)
    await command(stack, E2E_SCALE)
    record = await newest_request(stack)
    assert record is not None
    error.arm(stack, "chat.postEphemeral")
    before = len(stack.slack.response_posts)
    await click(stack, record.id, user=OPERATOR)  # an operator may not approve
    await settle(stack)
    answers = [p.text for p in stack.slack.response_posts[before:]]
    assert any("needs approver" in t for t in answers), answers
    assert (await stack.runtime.store.get_request(record.id)) == record  # still pending
    assert provider_puts(stack, "e2e") == 0


@pytest.mark.parametrize(
    ("method", "error"),
    [
        pytest.param(method, error, id=f"{method}-{error.name}")
        for method in ("views.open", "views.update")
        for error in ERRORS
        if method == "views.open" or error.error != "ratelimited"
    ],
)
async def test_a_form_that_cannot_open_is_explained_through_the_response_url(
    make_stack: StackFactory, method: str, error: SlackError
) -> None:
    stack = await make_stack(**FAST)
    error.arm(stack, method)
    reply = await command(stack, "update together-prod tc-h200-ondemand")
    assert reply.response_type == "ephemeral"
    assert "could not open the form" in reply.text and error.error in reply.text, reply.text
    assert "num_gpus=16" in reply.text  # what to type instead
    await settle(stack)
    assert await newest_request(stack) is None and provider_puts(stack, "together") == 0


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: e.name)
async def test_a_form_outcome_that_cannot_be_whispered_is_sent_as_a_dm(
    make_stack: StackFactory, error: SlackError
) -> None:
    stack = await make_stack(**FAST)
    await stack.sender.command(OPERATOR, INCIDENT, "update together-prod tc-h200-ondemand")
    view = await stack.slack.wait_for(
        lambda: next(
            (
                v
                for v in stack.slack.views.values()
                if v.user == OPERATOR and v.open and "num_gpus" in str(v.blocks)
            ),
            None,
        )
    )
    error.arm(stack, "chat.postEphemeral")
    result = await stack.sender.view_submission(OPERATOR, view.id, {"num_gpus": "16"})
    assert result.status == 200 and result.acked_in_time
    record = await wait_terminal(stack, (await wait_request(stack)).id)
    await settle(stack)
    assert record.state is S.SUCCEEDED and provider_puts(stack, "together") == 1
    dm = stack.slack.messages.get(stack.slack.dm_channel(OPERATOR), [])
    assert any(record.id in m.text for m in dm), [m.text for m in dm]


async def test_a_decision_click_survives_a_rate_limited_whisper(
    make_stack: StackFactory,
) -> None:
    # Retry-After: 1 once: slack_sdk waits and the refusal still arrives as an ephemeral.
    stack = await make_stack(**FAST)
    await command(stack, E2E_SCALE)
    record = await newest_request(stack)
    assert record is not None
    RECOVERING.arm(stack, "chat.postEphemeral")
    await click(stack, record.id, user=OPERATOR)
    await settle(stack)
    whispers = [e.text for e in stack.slack.ephemerals_for(OPERATOR)]
    assert any("needs approver" in t for t in whispers), whispers
    calls = stack.slack.calls_to("chat.postEphemeral")
    assert [c.error for c in calls] == ["ratelimited", None]


# -- a few steps on both state stores ---------------------------------------------------


@pytest.fixture
async def fast_stack(make_stack: StackFactory, database_url: str) -> LocalStack:
    return await make_stack(database_url=database_url, **FAST)


@pytest.mark.parametrize(
    ("step_name", "error_name"),
    [
        ("together-root", "not_in_channel"),
        ("e2e-result", "http_500"),
        ("e2e-prompt", "ratelimited"),
    ],
)
async def test_slack_faults_on_both_stores(
    fast_stack: LocalStack, step_name: str, error_name: str
) -> None:
    step = next(s for s in STEPS if f"{s.flow}-{s.name}" == step_name)
    error = next(e for e in ERRORS if e.name == error_name)
    await check_step(fast_stack, step, error)


@pytest.mark.parametrize(
    "error", [e for e in ERRORS if e.error != "ratelimited"], ids=lambda e: e.name
)
async def test_a_break_glass_form_that_cannot_open_is_explained_and_approves_nothing(
    make_stack: StackFactory, error: SlackError
) -> None:
    # An admin approving their own request is asked for a reason in a form; if the form
    # cannot open, they are told so and the request stays pending, unsent.
    stack = await make_stack(**FAST)
    await command(stack, E2E_SCALE, user="U01ALICE")
    record = await newest_request(stack)
    assert record is not None
    error.arm(stack, "views.open")
    before = len(stack.slack.response_posts)
    await click(stack, record.id, user="U01ALICE")
    await settle(stack)
    answers = [p.text for p in stack.slack.response_posts[before:]]
    assert any("could not open the break-glass form" in t for t in answers), answers
    assert (await stack.runtime.store.get_request(record.id)) == record
    assert provider_puts(stack, "e2e") == 0


# -- a signed payload naming another channel (issue #16 point 7) ------------------------

# ERIN may request anywhere, and is an admin only in C0RANDOM: every decision must be
# checked where the request or the alert lives, whatever channel a payload names.
_ERIN_VIEWER = (
    '  - users: [U05ERIN]\n    projects: ["*"]\n    role: viewer\n    channels: [C0INCIDENT]\n'
)
_ERIN_SCOPED = (
    '  - users: [U05ERIN]\n    projects: ["*"]\n    role: operator\n'
    '  - users: [U05ERIN]\n    projects: ["*"]\n    role: admin\n    channels: [C0RANDOM]\n'
)
assert _ERIN_VIEWER in DEMO_POLICY and _ERIN_VIEWER in WATCH_POLICY
ERIN, ELSEWHERE = "U05ERIN", "C0RANDOM"


async def _forged_click(stack: LocalStack, record: ChangeRequestRecord, action_id: str) -> str:
    """ERIN presses a button of the request's prompt, the payload naming C0RANDOM; what
    she is told."""
    prompt = await stack.slack.wait_for(lambda: approval_prompt(stack, record.id))
    seen = len(stack.slack.ephemerals_for(ERIN))
    result = await stack.sender.block_action(
        ERIN, ELSEWHERE, action_id=action_id, value=record.id, message_ts=prompt.ts
    )
    assert result.status == 200 and result.acked_in_time, result
    told = await next_ephemeral(stack, ERIN, seen)
    return told.text


@pytest.mark.parametrize("action_id", ["approve_request", "deny_request"])
async def test_a_decision_naming_another_channel_is_checked_in_the_requests_own(
    make_stack: StackFactory, action_id: str
) -> None:
    stack = await make_stack(policy_yaml=DEMO_POLICY.replace(_ERIN_VIEWER, _ERIN_SCOPED), **FAST)
    await command(stack, E2E_SCALE)
    record = await newest_request(stack)
    assert record is not None and record.channel == INCIDENT
    told = await _forged_click(stack, record, action_id)
    assert "needs approver" in told, told
    await settle(stack)
    assert (await stack.runtime.store.get_request(record.id)) == record  # still pending
    assert provider_puts(stack, "e2e") == 0


async def test_break_glass_naming_another_channel_is_checked_in_the_requests_own(
    make_stack: StackFactory,
) -> None:
    """ERIN's own request in C0INCIDENT: neither her click naming C0RANDOM nor a break-glass
    form whose metadata names it approves it."""
    stack = await make_stack(policy_yaml=DEMO_POLICY.replace(_ERIN_VIEWER, _ERIN_SCOPED), **FAST)
    await command(stack, E2E_SCALE, user=ERIN)
    record = await newest_request(stack)
    assert record is not None and record.channel == INCIDENT
    assert "needs approver" in await _forged_click(stack, record, "approve_request")
    assert not stack.slack.open_views_for(ERIN)  # no break-glass form for her here
    # the form a forged click opened before this fix, its metadata naming C0RANDOM
    trigger = stack.slack.issue_trigger_id(ERIN)
    await stack.runtime.messenger.open_view(trigger, break_glass_modal(record.id, ELSEWHERE))
    view = await stack.slack.wait_for(lambda: stack.slack.last_view_for(ERIN, open_only=True))
    seen = len(stack.slack.ephemerals_for(ERIN))
    submitted = await stack.sender.view_submission(
        ERIN, view.id, {"reason": "the cluster is on fire, no time to wait"}
    )
    assert submitted.ok, submitted
    told = await next_ephemeral(stack, ERIN, seen)
    assert "needs approver" in told.text, told.text
    await settle(stack)
    assert (await stack.runtime.store.get_request(record.id)) == record
    assert provider_puts(stack, "e2e") == 0


async def test_a_remediation_decision_naming_another_channel_is_checked_in_its_own(
    make_stack: StackFactory,
) -> None:
    stack = await watched_stack(
        make_stack, policy_yaml=WATCH_POLICY.replace(_ERIN_VIEWER, _ERIN_SCOPED)
    )
    remediation_id, message = await pending_remediation(stack)
    for action_id in ("approve_remediation", "reject_remediation"):
        seen = len(stack.slack.ephemerals_for(ERIN))
        result = await stack.sender.block_action(
            ERIN,
            ELSEWHERE,
            action_id=action_id,
            value=buttons(message)[action_id],
            message_ts=message.ts,
        )
        assert result.ok, result
        told = await next_ephemeral(stack, ERIN, seen)
        assert "needs approver" in told.text, told.text
    assert not stack.slack.open_views_for(ERIN)  # no reject form either
    assert decisions_sent(stack, remediation_id) == []


async def test_a_click_without_a_grant_learns_nothing_of_a_decided_request(
    make_stack: StackFactory,
) -> None:
    """Issue #16 point 9: MALLORY (no grant) clicking with a decided request's id is refused
    before its state or decider is told."""
    stack = await make_stack(**FAST)
    await command(stack, E2E_SCALE)
    record = await newest_request(stack)
    assert record is not None
    prompt = await stack.slack.wait_for(lambda: approval_prompt(stack, record.id))
    await click(stack, record.id)
    await wait_terminal(stack, record.id)
    seen = len(stack.slack.ephemerals_for("U06MALLORY"))
    result = await stack.sender.block_action(
        "U06MALLORY", INCIDENT, action_id="approve_request", value=record.id, message_ts=prompt.ts
    )
    assert result.ok, result
    told = (await next_ephemeral(stack, "U06MALLORY", seen)).text
    assert "no access" in told, told
    assert "already" not in told and "U02BOB" not in told and "succeeded" not in told
