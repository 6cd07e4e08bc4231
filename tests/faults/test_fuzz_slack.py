"""Fuzzing through the real HTTP endpoint: correctly signed slash commands, modal submissions
and block actions with random content, against one local stack started once for the module.

Properties, for every example: the bot answers 200 within Slack's 3 seconds; no exception
escapes a handler (no "unhandled error in a handler", no traceback, no failed task); every
command gets a visible answer (through its response_url, or a form); no raw Slack control
sequence from the input reaches Slack (Web API calls, response_url posts, acks); and nothing
changes at a provider — the policy here makes every change kind wait for approval, and no
fuzzed click carries a real request id, so not one PUT may happen.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.local.demo.stack import DEMO_POLICY, LocalStack, StackOptions
from bot.local.slack.sender import FORM_CONTENT_TYPE, SenderResult, Tamper
from tests.support.reliability import FAST_RETRY_SETTINGS, settle

T = TypeVar("T")

ALL_TOGETHER = "[scale_up, scale_down, change_type, decommission]"
ALL_E2E = (
    "[update_ssh_keys, update_image, restart_workers, restart_cluster, scale_cluster, "
    "attach_ip, detach_ip, add_security_group, remove_security_group]"
)
# The demo policy, with every change kind behind an approval.
FUZZ_POLICY = DEMO_POLICY.replace(
    "    notify_channel: C0GPUAUDIT\n  e2e-delhi:",
    f"    notify_channel: C0GPUAUDIT\n    require_approval: {ALL_TOGETHER}\n  e2e-delhi:",
).replace(
    "    auth_token_env: E2E_AUTH_TOKEN\n    notify_channel: C0GPUAUDIT\n",
    f"    auth_token_env: E2E_AUTH_TOKEN\n    notify_channel: C0GPUAUDIT\n"
    f"    require_approval: {ALL_E2E}\n",
)
# Slack control sequences typed by people; none may reach Slack unescaped. (A bare channel
# link ``<#C…>`` may: it cannot ping, carry a URL or a label, and refusals show it readably.)
INJECTED = [
    "<!channel>",
    "<!here>",
    "<!everyone>",
    "<@U0INJECT>",
    "<https://evil",
    "<#C0INJECT|spoofed>",
    "<#C0INJECT>",
]
FORBIDDEN = [raw for raw in INJECTED if raw != "<#C0INJECT>"]

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class LogTrap(logging.Handler):
    """Every record of every logger, kept for the properties."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def problems(self, since: int) -> list[str]:
        found = []
        for record in self.records[since:]:
            text = record.getMessage()
            if (
                record.exc_info
                or record.exc_text
                or "unhandled error" in text
                or "Traceback" in text
                or "Error handling request" in text  # aiohttp: an exception escaped
                or "Task exception was never retrieved" in text
                or (
                    "failed:" in text and record.name == "bot.core.requests.tasks"
                )  # a background task
            ):
                found.append(f"{record.name} {record.levelname}: {text[:300]}")
        return found


class FuzzStack:
    """A LocalStack running on its own event loop in a thread, for sync hypothesis tests."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        thread: threading.Thread,
        stack: LocalStack,
        trap: LogTrap,
    ) -> None:
        self.loop = loop
        self.thread = thread
        self.stack = stack
        self.trap = trap

    def __repr__(self) -> str:
        return "FuzzStack(...)"

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzStack]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fuzz-stack", daemon=True)
    thread.start()
    workdir: Path = tmp_path_factory.mktemp("fuzz")
    options = StackOptions(
        policy_yaml=FUZZ_POLICY,
        poll_seconds=0,
        transition_seconds=0.3,
        sweep_seconds=3600,
        total_timeout=2.0,
        provider_attempts=2,
        extra_settings=FAST_RETRY_SETTINGS,
    )
    stack = asyncio.run_coroutine_threadsafe(LocalStack.start(options, workdir), loop).result(30)
    trap = LogTrap()
    root = logging.getLogger()
    root.addHandler(trap)
    try:
        yield FuzzStack(loop, thread, stack, trap)
    finally:
        root.removeHandler(trap)
        asyncio.run_coroutine_threadsafe(stack.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@dataclass
class Marks:
    """Where the logs and the fake's records stood before an example."""

    logs: int
    calls: int
    posts: int


def marks(fz: FuzzStack) -> Marks:
    slack = fz.stack.slack
    return Marks(len(fz.trap.records), len(slack.calls), len(slack.response_posts))


def rendered(args: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments as far as Slack shows them: a view's ``private_metadata`` is
    echoed back to the app, never displayed, so markup in it is no injection."""
    view = args.get("view")
    if isinstance(view, str):
        try:
            view = json.loads(view)
        except ValueError:
            return args
    if not isinstance(view, dict):
        return args
    shown = {k: v for k, v in view.items() if k != "private_metadata"}
    return {**args, "view": shown}


def check_properties(fz: FuzzStack, before: Marks, result: SenderResult) -> None:
    stack = fz.stack
    assert result.status == 200, (result.status, result.body[:300])
    assert result.elapsed < 3.0, result.elapsed
    assert not fz.trap.problems(before.logs), fz.trap.problems(before.logs)
    calls = stack.slack.calls[before.calls :]
    bodies = [json.dumps(rendered(c.args), ensure_ascii=False) for c in calls]
    bodies += [
        json.dumps([p.text, p.blocks], ensure_ascii=False)
        for p in stack.slack.response_posts[before.posts :]
    ]
    bodies.append(result.body)
    for body in bodies:
        for raw in FORBIDDEN:
            assert raw not in body, (raw, body[:500])
    puts = stack.together.calls(None, "PUT") + stack.e2e.calls(None, "PUT")
    assert puts == [], puts


# -- slash commands ---------------------------------------------------------------------

USERS = st.sampled_from(["U01ALICE", "U02BOB", "U04DAVE", "U05ERIN", "U06MALLORY", "U0NOBODY"])
CHANNELS = st.sampled_from(["C0INCIDENT", "C0RANDOM", "C0GPUAUDIT", "C0UNKNOWN", "D0DIRECT"])
WORDS = st.sampled_from(
    [
        "help", "list", "show", "update", "action", "audit", "together-prod", "e2e-delhi",
        "nope-proj", "tc-h100-reserved", "tc-h200-ondemand", "tc-b200-pool", "tc-booting", "101",
        "102", "999", "scale_cluster", "attach_ip", "detach_ip", "update_ssh_keys",
        "restart_workers", "num_gpus=16", "num_gpus=8", "num_gpus=-1", "num_preemptible_gpus=12",
        "num_capacity_pool_gpus=8", "cluster_type=SLURM", "additional_nodes=2",
        "reserved_ip_id=501", "ssh_key_ids=11,12", "reservation_end_time=2020-01-01T00:00:00Z",
        'reason="<!channel> look"', "reason='<@U0INJECT>'", "\u201cquoted\u201d", "=", '"',
        *INJECTED, "<https://evil.example|click here>", "&amp;", "5", "1000",
    ]
)  # fmt: skip
COMMAND_TEXT = st.one_of(
    st.lists(WORDS, min_size=1, max_size=7).map(" ".join),
    st.text(max_size=200),
    st.tuples(WORDS, st.text(max_size=50), WORDS).map(" ".join),
    st.text(alphabet=st.sampled_from("<>!@#|&\"' =abc"), min_size=1, max_size=60),
    st.text(min_size=3000, max_size=5000),
)


def answered(fz: FuzzStack, before: Marks) -> bool:
    """The command was answered visibly: a response_url post, or a form was opened."""
    slack = fz.stack.slack
    if len(slack.response_posts) > before.posts:
        return True
    return any(c.method == "views.open" and c.ok for c in slack.calls[before.calls :])


@FUZZ
@given(text=COMMAND_TEXT, user=USERS, channel=CHANNELS)
def test_any_command_is_acked_answered_and_changes_nothing(
    fuzz: FuzzStack, text: str, user: str, channel: str
) -> None:
    stack = fuzz.stack
    before = marks(fuzz)

    async def go() -> SenderResult:
        result = await stack.sender.command(user, channel, text)
        await stack.slack.wait_for(lambda: answered(fuzz, before), within=10.0)
        await settle(stack)
        return result

    result = fuzz.run(go())
    check_properties(fuzz, before, result)


# -- modal submissions ------------------------------------------------------------------

JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=40)
)
JSON = st.recursive(
    JSON_LEAF,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=10), c, max_size=3),
    max_leaves=12,
)
BLOCKS = [
    "num_gpus", "num_reserved_gpus", "num_preemptible_gpus", "num_capacity_pool_gpus",
    "cluster_type", "reservation_end_time", "action", "additional_nodes", "ssh_key_ids",
    "image_version_id", "reserved_ip_id", "security_group_id", "security_groups_ids", "reason",
]  # fmt: skip
VALUES = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["16", "8", "0", "-3", "12", "SLURM", "KUBERNETES", "scale_cluster",
                     "attach_ip", "11,12", "501", "2026-12-31T00:00:00Z", *INJECTED]),
    st.text(min_size=2000, max_size=3500),
)  # fmt: skip


@st.composite
def element(draw: st.DrawFn) -> Any:
    """One element's state as Slack sends it — or something that only looks like it."""
    value = draw(VALUES)
    shape = draw(st.integers(0, 5))
    if shape == 0:
        return {"type": "plain_text_input", "value": value}
    if shape == 1:
        return {"type": "static_select", "selected_option": {"value": value}}
    if shape == 2:
        return {"type": "datetimepicker", "selected_date_time": draw(st.integers(-(2**40), 2**40))}
    if shape == 3:
        return {"type": "multi_static_select", "selected_options": [{"value": value}]}
    return draw(JSON)


@st.composite
def metadata(draw: st.DrawFn) -> Any:
    valid = {
        "project": draw(st.sampled_from(["together-prod", "e2e-delhi", "nope", ""])),
        "cluster_id": draw(st.sampled_from(["tc-h200-ondemand", "tc-h100-reserved", "101", "x"])),
        "channel": draw(st.sampled_from(["C0INCIDENT", "C0RANDOM", "C0UNKNOWN", "<!channel>"])),
        "request_id": draw(st.sampled_from(["CR-ZZZZZZ", "", "<!here>", "1"])),
    }
    choice = draw(st.integers(0, 4))
    if choice == 0:
        return json.dumps(valid)
    if choice == 1:
        return json.dumps({k: v for k, v in valid.items() if draw(st.booleans())})
    if choice == 2:
        return json.dumps(draw(JSON))
    if choice == 3:
        return draw(st.text(max_size=100))
    return draw(JSON)


@st.composite
def view_submissions(draw: st.DrawFn, user: str) -> dict[str, Any]:
    values: Any = {
        block: {block: draw(element())}
        for block in draw(st.lists(st.sampled_from(BLOCKS), unique=True, max_size=8))
    }
    if draw(st.integers(0, 6)) == 0:
        values = draw(JSON)
    view: dict[str, Any] = {
        "id": "V0FUZZ",
        "type": "modal",
        "callback_id": draw(
            st.sampled_from(["gpu_update", "gpu_action", "gpu_break_glass"]) | st.text(max_size=12)
        ),
        "private_metadata": draw(metadata()),
        "state": {"values": values},
        "hash": "1.abc",
        "title": {"type": "plain_text", "text": "gpuops"},
        "blocks": [],
    }
    payload: dict[str, Any] = {
        "type": "view_submission",
        "user": {"id": user, "username": "fuzz", "name": "fuzz", "team_id": "T0GPUOPS"},
        "team": {"id": "T0GPUOPS", "domain": "gpuops"},
        "api_app_id": "A0GPUOPS",
        "token": "localslack-not-a-secret",
        "trigger_id": "1.2.fuzz",
        "view": view,
        "response_urls": [],
    }
    return mangle(draw, payload, protected={"type"})


def mangle(draw: st.DrawFn, payload: dict[str, Any], protected: set[str]) -> dict[str, Any]:
    """Drop keys, give them values of the wrong type, or make strings huge — sometimes."""
    for key in list(payload):
        if key in protected:
            continue
        choice = draw(st.integers(0, 14))
        if choice == 0:
            del payload[key]
        elif choice == 1:
            payload[key] = draw(JSON)
        elif choice == 2:
            payload[key] = "x" * draw(st.integers(3000, 20000))
    return payload


async def post_payload(fz: FuzzStack, payload: dict[str, Any]) -> SenderResult:
    body = urlencode({"payload": json.dumps(payload)})
    result = await fz.stack.sender.post(body, FORM_CONTENT_TYPE)
    await settle(fz.stack)
    return result


@FUZZ
@given(data=st.data(), user=USERS)
def test_any_modal_submission_is_acked_and_changes_nothing(
    fuzz: FuzzStack, data: st.DataObject, user: str
) -> None:
    payload = data.draw(view_submissions(user))
    before = marks(fuzz)
    result = fuzz.run(post_payload(fuzz, payload))
    check_properties(fuzz, before, result)
    if result.json is not None:  # an ack with a body: only what Slack accepts
        assert isinstance(result.json, dict)
        assert result.json.get("response_action") in ("errors", "update", "push", "clear")
        errors = result.json.get("errors", {})
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in errors.items())


# -- block actions ----------------------------------------------------------------------

ACTION_IDS = st.sampled_from(
    ["approve_request", "deny_request", "cancel_request", "action", "unknown_button", ""]
) | st.text(max_size=20)
NOT_REQUEST_IDS = st.one_of(
    st.sampled_from(["CR-ZZZZZZ", "CR-", "cr-abcdef", "", " ", "null", *INJECTED]),
    st.text(max_size=40),
    st.text(min_size=500, max_size=5000),
)


@st.composite
def block_actions(draw: st.DrawFn, fz: FuzzStack, user: str, channel: str) -> dict[str, Any]:
    slack = fz.stack.slack
    action: dict[str, Any] = {
        "type": draw(st.sampled_from(["button", "static_select"])),
        "action_id": draw(ACTION_IDS),
        "block_id": draw(st.sampled_from(["approval", "action", "x"])),
        "value": draw(NOT_REQUEST_IDS),
        "action_ts": "1700000000.000001",
    }
    if draw(st.booleans()):
        action["selected_option"] = draw(st.fixed_dictionaries({"value": NOT_REQUEST_IDS}) | JSON)
    action = mangle(draw, action, protected=set())
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": user, "username": "fuzz", "name": "fuzz", "team_id": "T0GPUOPS"},
        "api_app_id": "A0GPUOPS",
        "token": "localslack-not-a-secret",
        "trigger_id": slack.issue_trigger_id(user),
        "team": {"id": "T0GPUOPS", "domain": "gpuops"},
        "container": {"type": "message", "message_ts": "1.000001", "channel_id": channel},
        "channel": {"id": channel, "name": "incident"},
        "message": {"type": "message", "ts": "1.000001", "text": ""},
        "state": {"values": {}},
        "response_url": slack.new_response_url(channel, user, message_ts="1.000001"),
        "actions": draw(st.sampled_from([[action], [action, action], [], [draw(JSON)]])),
    }
    if draw(st.integers(0, 3)) == 0:
        payload["container"] = {"type": "view", "view_id": "V0FUZZ"}
        payload["view"] = {
            "id": "V0FUZZ",
            "callback_id": "gpu_action",
            "private_metadata": draw(metadata()),
            "state": {"values": {}},
        }
    return mangle(draw, payload, protected={"type"})


@FUZZ
@given(data=st.data(), user=USERS, channel=CHANNELS)
def test_any_click_is_acked_and_changes_nothing(
    fuzz: FuzzStack, data: st.DataObject, user: str, channel: str
) -> None:
    payload = data.draw(block_actions(fuzz, user, channel))
    before = marks(fuzz)
    result = fuzz.run(post_payload(fuzz, payload))
    check_properties(fuzz, before, result)


def test_markup_echoed_only_in_private_metadata_is_not_rendered_markup(fuzz: FuzzStack) -> None:
    """The example hypothesis saved: a click in a form whose ``private_metadata`` holds
    ``<!channel>``. gpuops echoes the metadata back in ``views.update``; Slack never shows
    it, so the markup property must not flag it (it looks only at what is rendered)."""
    slack = fuzz.stack.slack
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": "U04DAVE", "username": "dave", "name": "dave", "team_id": "T0GPUOPS"},
        "api_app_id": "A0GPUOPS",
        "token": "localslack-not-a-secret",
        "trigger_id": slack.issue_trigger_id("U04DAVE"),
        "team": {"id": "T0GPUOPS", "domain": "gpuops"},
        "container": {"type": "view", "view_id": "V0FUZZ"},
        "actions": [
            {
                "type": "static_select",
                "action_id": "action",
                "block_id": "action",
                "selected_option": {"value": "scale_cluster"},
                "action_ts": "1700000000.000001",
            }
        ],
        "view": {
            "id": "V0FUZZ",
            "callback_id": "gpu_action",
            "private_metadata": json.dumps({"project": "e2e-delhi", "channel": "<!channel>"}),
            "state": {"values": {}},
        },
    }
    before = marks(fuzz)
    result = fuzz.run(post_payload(fuzz, payload))
    echoed = [c for c in slack.calls[before.calls :] if "<!channel>" in json.dumps(c.args)]
    assert echoed, [c.method for c in slack.calls[before.calls :]]  # the echo does happen
    check_properties(fuzz, before, result)


def test_the_fuzzed_policy_gates_every_change_behind_approval(fuzz: FuzzStack) -> None:
    """What makes "no PUT" a property here: a valid no-approval change under the demo policy
    (a scale-up) only opens a pending request under the fuzz policy."""
    stack = fuzz.stack
    before = marks(fuzz)

    async def go() -> SenderResult:
        result = await stack.sender.command(
            "U04DAVE", "C0INCIDENT", "update together-prod tc-h200-ondemand num_gpus=16"
        )
        await stack.slack.wait_for(lambda: answered(fuzz, before))
        await settle(stack)
        return result

    result = fuzz.run(go())
    check_properties(fuzz, before, result)
    assert "waiting for approval" in stack.slack.response_posts[-1].text


def test_injected_markup_reaches_slack_escaped(fuzz: FuzzStack) -> None:
    """The markup property above is not vacuous: the text does reach Slack, escaped."""
    stack = fuzz.stack
    before = marks(fuzz)
    text = 'action e2e-delhi 101 scale_cluster additional_nodes=1 reason="<!channel> <@U0INJECT>"'

    async def go() -> SenderResult:
        result = await stack.sender.command("U04DAVE", "C0INCIDENT", text)
        await stack.slack.wait_for(lambda: answered(fuzz, before))
        await settle(stack)
        return result

    result = fuzz.run(go())
    check_properties(fuzz, before, result)
    calls = stack.slack.calls[before.calls :]
    roots = [json.dumps(c.args) for c in calls if "Reason" in str(c.args)]
    assert roots, [c.args for c in calls]
    assert all("&lt;!channel&gt; &lt;@U0INJECT&gt;" in r for r in roots), roots


# -- what the fuzzers found, kept as fixed examples --------------------------------------

FOUND: dict[str, dict[str, Any]] = {
    "action-without-action_id": {"type": "block_actions", "actions": [{}]},
    "actions-not-a-list": {"type": "block_actions", "actions": "x"},
    "view-not-an-object": {
        "type": "block_actions",
        "actions": [{"action_id": "unknown_button"}],
        "view": "x" * 100,
    },
    "view-without-callback_id": {"type": "view_submission", "view": {}},
    "view-without-type": {"type": "view_submission", "view": {"callback_id": "gpu_update"}},
    "unknown-callback_id": {
        "type": "view_submission",
        "view": {"type": "modal", "callback_id": "zzz", "state": {}},
    },
    "unknown-action_id": {"type": "block_actions", "actions": [{"action_id": "nope"}]},
    "event-not-an-object": {"type": "event_callback", "event": "x", "event_id": "Ev0FUZZ"},
}


@pytest.mark.parametrize("name", sorted(FOUND))
async def test_payloads_bolt_cannot_read_are_acknowledged_not_500(
    sqlite_stack: LocalStack, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    payload = FOUND[name]
    if payload["type"] == "event_callback":
        body, content_type = json.dumps(payload), "application/json"
    else:
        body, content_type = urlencode({"payload": json.dumps(payload)}), FORM_CONTENT_TYPE
    with caplog.at_level(logging.DEBUG):
        result = await sqlite_stack.sender.post(body, content_type)
        await settle(sqlite_stack)
    assert result.status == 200, (result.status, result.body)
    assert not [r for r in caplog.records if r.exc_info or "unhandled error" in r.getMessage()]
    forged = await sqlite_stack.sender.post(body, content_type, tamper=Tamper.WRONG_SIGNATURE)
    assert forged.status == 401
