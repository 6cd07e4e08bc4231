"""Helpers for the change-request workflow tests (tests/integration/approvals/test_workflow_*.py):
open a request and find its thread, click its buttons as a person would, wait for its state,
read its audit rows, deliver one Slack request twice at the same moment, and run the bot as a
separate ``gpuops serve`` process that can be killed."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from bot.core.answers import Notice
from bot.core.ask.change import ChangeAsk
from bot.core.home_refresh import FanOutNotifier
from bot.core.store import ChangeRequestRecord, RequestState, Store
from bot.local.demo.stack import LocalStack
from bot.local.slack.models import Ephemeral, Message, View
from bot.local.slack.sender import SenderResult, SlackSender
from bot.slack.notifier import SlackNotifier
from tests.support.slack_support import roots

CHANNEL = "C0INCIDENT"
NOTIFY_CHANNEL = "C0GPUAUDIT"  # the demo policy's notify_channel for both projects
ALICE, BOB, CAROL, DAVE, ERIN, MALLORY = (
    "U01ALICE",
    "U02BOB",
    "U03CAROL",
    "U04DAVE",
    "U05ERIN",
    "U06MALLORY",
)
REQUEST_ID = re.compile(r"CR-[0-9A-Z]{6}")
DECISION_BUTTONS = ("approve_request", "deny_request", "cancel_request")


@dataclass(frozen=True)
class Opened:
    """A change request as its channel shows it: the root message and the approval prompt."""

    id: str
    channel: str
    root_ts: str
    prompt_ts: str | None


def buttons(message: Message) -> dict[str, str]:
    """action_id → value of the buttons on a message."""
    found: dict[str, str] = {}
    for block in message.blocks or []:
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("type") == "button":
                found[str(element["action_id"])] = str(element.get("value"))
    return found


def readable_text(message: Message | Ephemeral) -> str:
    """Every text in a message's blocks, joined (what a person reads)."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            text = node.get("text")
            if isinstance(text, str):
                found.append(text)
            for value in node.values():
                if not isinstance(value, str):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(message.blocks or [])
    return "\n".join(found)


def find_prompt(stack: LocalStack, channel: str, root_ts: str) -> Message | None:
    return next(
        (m for m in stack.slack.replies(channel, root_ts) if "approve_request" in buttons(m)),
        None,
    )


def slack_notifier(stack: LocalStack) -> SlackNotifier:
    """The Slack notifier the workflow tells (e.g. to set when a root says "running")."""
    notifier = stack.runtime.workflow.deps.notifier
    assert isinstance(notifier, FanOutNotifier) and isinstance(notifier.primary, SlackNotifier)
    return notifier.primary


async def request(
    stack: LocalStack, user: str, text: str, *, channel: str = CHANNEL, approval: bool = True
) -> Opened:
    """``user`` types ``/gpu text``; wait for the request's root message (and its approval
    prompt when ``approval``)."""
    before = len(roots(stack, channel))
    answered = len(stack.slack.ephemerals_for(user))
    result = await stack.sender.command(user, channel, text)
    assert result.status == 200 and result.acked_in_time, result
    root = await stack.slack.wait_for(
        lambda: next((m for m in roots(stack, channel)[before:] if REQUEST_ID.search(m.text)), None)
    )
    match = REQUEST_ID.search(root.text)
    assert match is not None
    # the command's own answer to the requester comes last
    answer = await next_ephemeral(stack, user, answered)
    assert match.group(0) in answer.text, answer.text
    prompt = None
    if approval:
        prompt = await stack.slack.wait_for(lambda: find_prompt(stack, channel, root.ts))
    return Opened(match.group(0), channel, root.ts, prompt.ts if prompt else None)


async def open_direct(
    stack: LocalStack,
    user: str,
    project: str,
    cluster_id: str,
    action: str,
    inputs: dict[str, str],
    *,
    channel: str = CHANNEL,
) -> Opened:
    """Open a request through the workflow itself (no slash command): the lean way to make
    many requests whose buttons are then clicked over HTTP."""
    reply = await stack.runtime.workflow.request_change(
        ChangeAsk(
            user=user,
            channel=channel,
            project=project,
            cluster_id=cluster_id,
            action=action,
            inputs=inputs,
            reason=None,
        )
    )
    assert isinstance(reply.content, Notice), reply
    match = REQUEST_ID.search(reply.content.text)
    assert match is not None and "waiting for approval" in reply.content.text, reply
    record = await stack.runtime.store.get_request(match.group(0))
    assert record is not None and record.root_ts is not None
    prompt = find_prompt(stack, channel, record.root_ts)
    assert prompt is not None
    return Opened(record.id, channel, record.root_ts, prompt.ts)


async def click(
    stack: LocalStack,
    opened: Opened,
    user: str,
    action_id: str = "approve_request",
    *,
    sender: SlackSender | None = None,
    channel: str | None = None,
) -> SenderResult:
    """``user`` presses a button of the approval prompt (through ``sender``: another replica,
    or a sender that delivers twice)."""
    assert opened.prompt_ts is not None
    result = await (sender or stack.sender).block_action(
        user,
        channel or opened.channel,
        action_id=action_id,
        value=opened.id,
        message_ts=opened.prompt_ts,
    )
    assert result.status == 200 and result.acked_in_time, result
    return result


async def deny(
    stack: LocalStack, opened: Opened, user: str, reason: str | None = None
) -> SenderResult:
    """``user`` presses Deny and submits its form, with ``reason`` or leaving it empty."""
    await click(stack, opened, user, "deny_request")

    def form() -> View | None:
        view = stack.slack.last_view_for(user, open_only=True)
        return view if view is not None and view.callback_id == "gpu_deny" else None

    view = await stack.slack.wait_for(form)
    submitted = await stack.sender.view_submission(user, view.id, {"reason": reason})
    assert submitted.status == 200 and not submitted.problems, submitted
    return submitted


async def wait_state(
    store: Store, request_id: str, *states: RequestState, within: float = 20.0
) -> ChangeRequestRecord:
    """Wait until the request is in one of ``states`` (the store is the truth)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        record = await store.get_request(request_id)
        if record is not None and record.state in states:
            return record
        if loop.time() > deadline:
            shown = record.state if record else "missing"
            raise AssertionError(f"{request_id} is {shown}, not {[str(s) for s in states]}")
        await asyncio.sleep(0.005)


async def poll_until(predicate: Callable[[], object], *, within: float = 20.0) -> None:
    """Wait for a condition FakeSlack does not hear about (a simulator's request log, the
    store); ``predicate`` may be a coroutine function."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        outcome = predicate()
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if outcome:
            return
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(0.005)


async def wait_unlocked(store: Store, provider: str, project: str, cluster_id: str) -> None:
    """Wait until no change holds the cluster (the executor frees it after reporting)."""

    async def free() -> bool:
        return await store.cluster_holder(provider, project, cluster_id) is None

    await poll_until(free)


async def wait_root(stack: LocalStack, opened: Opened, words: str) -> Message:
    """Wait until the root message has been edited to show ``words`` (e.g. "done")."""

    def edited() -> Message | None:
        root = stack.slack.message(opened.channel, opened.root_ts)
        return root if root is not None and root.text.startswith(f"[{words}]") else None

    return await stack.slack.wait_for(edited)


async def wait_reply(stack: LocalStack, opened: Opened, needle: str) -> Message:
    """Wait for a message in the request's thread whose text contains ``needle``."""
    return await stack.slack.wait_for(
        lambda: next(
            (m for m in stack.slack.replies(opened.channel, opened.root_ts) if needle in m.text),
            None,
        )
    )


async def wait_summary(stack: LocalStack, opened: Opened) -> Message:
    """Wait for the request's cluster summary in its thread (the reply headed by the
    cluster's name)."""
    return await stack.slack.wait_for(
        lambda: next(
            (
                m
                for m in stack.slack.replies(opened.channel, opened.root_ts)
                if (m.blocks or [{}])[0].get("type") == "header"
            ),
            None,
        )
    )


async def wait_mirror(stack: LocalStack, opened: Opened, prefix: str) -> Message:
    """Wait for the notify channel's copy that starts with ``prefix`` (e.g. "Change done"):
    the last thing the bot does when a request ends."""
    return await stack.slack.wait_for(
        lambda: next(
            (
                m
                for m in stack.slack.messages.get(NOTIFY_CHANNEL, [])
                if m.text.startswith(prefix) and opened.id in m.text
            ),
            None,
        )
    )


def thread_texts(stack: LocalStack, opened: Opened) -> list[str]:
    return [m.text for m in stack.slack.replies(opened.channel, opened.root_ts)]


async def next_ephemeral(
    stack: LocalStack, user: str, seen: int, *, within: float = 20.0
) -> Ephemeral:
    """The first ephemeral ``user`` gets after the ``seen`` they had."""
    return await stack.slack.wait_for(
        lambda: next(iter(stack.slack.ephemerals_for(user)[seen:]), None), within=within
    )


async def audit_trail(store: Store, request_id: str) -> list[tuple[str, str, str | None]]:
    """(actor, event, outcome) of a request's audit rows, oldest first."""
    rows = await store.list_audit(request_id=request_id, limit=100)
    return [(r.actor, r.event, r.outcome) for r in reversed(rows)]


def events(trail: Iterable[tuple[str, str, str | None]]) -> list[str]:
    return [event for _, event, _ in trail]


# -- one request delivered twice at the same moment -----------------------------------------


class TwiceAtOnce(httpx.AsyncBaseTransport):
    """Sends every request twice at the same moment — the same bytes, signature included —
    as Slack's at-least-once delivery racing with itself; the second copy goes to
    ``second_url`` if given (another replica behind the load balancer). Answers with the
    first answer."""

    def __init__(self, second_url: str | None = None) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.second_url = second_url
        self.statuses: list[int] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()

        def copy(url: httpx.URL | str) -> httpx.Request:
            return httpx.Request(request.method, url, headers=request.headers, content=body)

        first, second = await asyncio.gather(
            self._inner.handle_async_request(copy(request.url)),
            self._inner.handle_async_request(copy(self.second_url or request.url)),
        )
        await second.aread()
        await second.aclose()
        self.statuses += [first.status_code, second.status_code]
        return first

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def twice_at_once_sender(
    stack: LocalStack, *, second_url: str | None = None
) -> AsyncIterator[tuple[SlackSender, TwiceAtOnce]]:
    """A sender whose every request is delivered twice at once (to the stack's bot, and the
    second copy to ``second_url`` if given)."""
    transport = TwiceAtOnce(second_url)
    async with httpx.AsyncClient(transport=transport, timeout=10) as http:
        yield (
            SlackSender(stack.events_url, stack.options.signing_secret, stack.slack, http=http),
            transport,
        )


# -- the bot as a separate process ------------------------------------------------------------


@dataclass
class ServeProcess:
    process: asyncio.subprocess.Process
    base_url: str
    sender: SlackSender
    log_path: Path

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash or an OOM kill."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_env(stack: LocalStack, instance_id: str) -> dict[str, str]:
    """The environment of a ``gpuops`` child process on the stack's database, simulators
    and FakeSlack, with its own instance id."""
    settings = stack.runtime.settings
    options = stack.options
    return {
        "PATH": os.environ.get("PATH", ""),
        "SLACK_BOT_TOKEN": options.bot_token,
        "SLACK_SIGNING_SECRET": options.signing_secret,
        "SLACK_API_URL": stack.slack.api_url,
        "GPUOPS_POLICY": str(settings.gpuops_policy),
        "GPUOPS_DATABASE_URL": settings.gpuops_database_url,
        "TOGETHER_BASE_URL": stack.together.base_url,
        "E2E_BASE_URL": stack.e2e.base_url,
        "TOGETHER_API_KEY": options.together_key,
        "E2E_API_KEY": options.e2e_key,
        "E2E_AUTH_TOKEN": options.e2e_token,
        "GPUOPS_POLL_SECONDS": "0",
        "GPUOPS_SWEEP_SECONDS": "3600",
        "GPUOPS_TOTAL_TIMEOUT": str(settings.gpuops_total_timeout),
        "GPUOPS_PROVIDER_ATTEMPTS": str(settings.gpuops_provider_attempts),
        "GPUOPS_RETRY_WAIT_INITIAL": str(settings.gpuops_retry_wait_initial),
        "GPUOPS_RETRY_WAIT_MAX": str(settings.gpuops_retry_wait_max),
        "GPUOPS_RETRY_AFTER_CAP": str(settings.gpuops_retry_after_cap),
        "GPUOPS_EXEC_LEASE_SECONDS": str(settings.gpuops_exec_lease_seconds),
        "GPUOPS_INSTANCE_ID": instance_id,
    }


@asynccontextmanager
async def serve_process(stack: LocalStack, instance_id: str) -> AsyncIterator[ServeProcess]:
    """``gpuops serve`` in a child process, on the stack's database, simulators and
    FakeSlack, with its own instance id."""
    options = stack.options
    port = _free_port()
    env = process_env(stack, instance_id)
    gpuops = Path(sys.executable).with_name("gpuops")
    log_path = stack.workdir / f"serve-{instance_id}.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            str(gpuops),
            "--log-level",
            "WARNING",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            env=env,
            cwd=stack.workdir,
            stdout=log,
            stderr=log,
        )
    base_url = f"http://127.0.0.1:{port}"
    served = ServeProcess(
        process,
        base_url,
        SlackSender(f"{base_url}/slack/events", options.signing_secret, stack.slack),
        log_path,
    )
    try:
        await _wait_healthy(served)
        yield served
    finally:
        served.kill()
        await process.wait()
        await served.sender.aclose()


async def _wait_healthy(served: ServeProcess, within: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    async with httpx.AsyncClient(timeout=1.0) as http:
        while loop.time() < deadline:
            if served.process.returncode is not None:
                break
            try:
                if (await http.get(f"{served.base_url}/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError(f"gpuops serve did not come up: {served.log_path.read_text()[-2000:]}")
