"""Shared driving code for the reliability tests (fault matrix, Slack-side faults, fuzzing,
leak scan): fast retry settings, a transport that refuses chosen connections for real, and
waits for what the bot does after it has acked."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.core.store import (
    TERMINAL_STATES,
    ChangeRequestRecord,
    RequestState,
    Store,
    StoreUnavailable,
)
from bot.local.demo.stack import LocalStack
from bot.local.slack.models import Ephemeral, Message, ResponsePost
from bot.providers.e2e import E2EAdapter
from bot.providers.http import ClientSettings, ProviderTransport
from bot.providers.together import TogetherAdapter
from bot.providers.wire import AiohttpTransport
from bot.slack.deadline import RUNNING_LISTENERS

# Tiny backoff so that a matrix of retried faults stays fast; a 429's Retry-After is
# honoured but capped at 50 ms.
FAST_RETRY_SETTINGS: dict[str, Any] = {
    "gpuops_retry_wait_initial": 0.0,
    "gpuops_retry_wait_max": 0.01,
    "gpuops_retry_after_cap": 0.05,
}
TOTAL_TIMEOUT = 0.5
ATTEMPTS = 3
FAST: dict[str, Any] = {
    "total_timeout": TOTAL_TIMEOUT,
    "provider_attempts": ATTEMPTS,
    "extra_settings": FAST_RETRY_SETTINGS,
}

INCIDENT = "C0INCIDENT"
AUDIT_CHANNEL = "C0GPUAUDIT"
OPERATOR = "U04DAVE"
APPROVER = "U02BOB"

TOGETHER_SCALE_UP = "update together-prod tc-h200-ondemand num_gpus=16"  # no approval
TOGETHER_SCALE_DOWN = "update together-prod tc-h100-reserved num_gpus=8"  # needs approval
E2E_SCALE = "action e2e-delhi 101 scale_cluster additional_nodes=2"  # needs approval
E2E_ATTACH = "action e2e-delhi 101 attach_ip reserved_ip_id=501"  # no approval


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class RefusingTransport(httpx.AsyncBaseTransport):
    """Delegates to the transport gpuops sends with (bot.providers.wire), but sends the
    requests ``refuse`` selects to a closed port: a genuine ECONNREFUSED, counted in
    ``refused``."""

    def __init__(
        self, refuse: Callable[[httpx.Request], bool], settings: ClientSettings | None = None
    ) -> None:
        s = settings or ClientSettings()
        self.refuse = refuse
        self.inner = AiohttpTransport(
            connect_timeout=s.connect_timeout, read_timeout=s.total_timeout
        )
        self.port = closed_port()
        self.refused: list[tuple[str, str]] = []
        self.seen: list[tuple[str, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.method, request.url.path))
        if self.refuse(request):
            self.refused.append((request.method, request.url.path))
            request.url = request.url.copy_with(port=self.port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def counting_transport() -> RefusingTransport:
    """A real HTTP transport that records every request as gpuops sends it (``seen``): on a
    busy machine a call may time out before the simulator has read it, so what was tried
    is counted here."""
    return RefusingTransport(lambda _: False)


def provider_transport(stack: LocalStack, project: str) -> ProviderTransport:
    adapter = stack.runtime.registry.get(project)
    assert isinstance(adapter, TogetherAdapter | E2EAdapter)
    return adapter.client.transport


async def refuse_connections(
    stack: LocalStack, project: str, refuse: Callable[[httpx.Request], bool]
) -> RefusingTransport:
    """Route the project's provider calls through a RefusingTransport from now on."""
    transport = provider_transport(stack, project)
    await transport.aclose()  # the next call builds a new client on the new transport
    refusing = RefusingTransport(refuse, transport.settings)
    transport.transport = refusing
    return refusing


# -- waiting for what the bot does after the ack ---------------------------------------------


def _bolt_listeners() -> list[asyncio.Task[Any]]:
    """Listeners at work: the dispatches going on after their answer was written."""
    current = asyncio.current_task()
    return [t for t in RUNNING_LISTENERS.running() if t is not current]


async def settle(stack: LocalStack, within: float = 15.0) -> None:
    """Wait until no Slack handler and no workflow background task is running."""
    async with asyncio.timeout(within):
        while True:
            await stack.runtime.workflow.drain()
            busy = _bolt_listeners()
            if not busy:
                await asyncio.sleep(0)
                if not _bolt_listeners() and not stack.runtime.workflow.tasks:
                    return
                continue
            await asyncio.wait(busy)


async def command(stack: LocalStack, text: str, *, user: str = OPERATOR) -> ResponsePost:
    """Send ``/gpu text`` and return the answer posted to its response_url."""
    before = len(stack.slack.response_posts)
    result = await stack.sender.command(user, INCIDENT, text)
    assert result.status == 200 and result.acked_in_time, result
    return await stack.slack.wait_for(
        lambda: (
            stack.slack.response_posts[before] if len(stack.slack.response_posts) > before else None
        ),
        within=10.0,
    )


async def newest_request(stack: LocalStack) -> ChangeRequestRecord | None:
    requests = await stack.runtime.store.list_requests(limit=10_000)  # oldest first
    return requests[-1] if requests else None


async def wait_request(stack: LocalStack, within: float = 20.0) -> ChangeRequestRecord:
    """The newest request, once there is one (a form's submission creates it after the ack)."""
    async with asyncio.timeout(within):
        while (record := await newest_request(stack)) is None:
            await asyncio.sleep(0.02)
    return record


async def wait_state(
    stack: LocalStack, request_id: str, states: set[RequestState], within: float = 20.0
) -> ChangeRequestRecord:
    async with asyncio.timeout(within):
        while True:
            record = await stack.runtime.store.get_request(request_id)
            if record is not None and record.state in states:
                return record
            await asyncio.sleep(0.02)


async def wait_terminal(stack: LocalStack, request_id: str) -> ChangeRequestRecord:
    return await wait_state(stack, request_id, set(TERMINAL_STATES))


def approval_prompt(stack: LocalStack, request_id: str, channel: str = INCIDENT) -> Message | None:
    for message in stack.slack.messages.get(channel, []):
        for block in message.blocks or []:
            if block.get("block_id") != "approval":
                continue
            values = [e.get("value") for e in block.get("elements", [])]
            if request_id in values:
                return message
    return None


async def click(
    stack: LocalStack, request_id: str, action_id: str = "approve_request", user: str = APPROVER
) -> None:
    prompt = await stack.slack.wait_for(lambda: approval_prompt(stack, request_id))
    result = await stack.sender.block_action(
        user, INCIDENT, action_id=action_id, value=request_id, message_ts=prompt.ts
    )
    assert result.status == 200 and result.acked_in_time, result


def thread_texts(stack: LocalStack, record: ChangeRequestRecord) -> list[str]:
    assert record.root_ts, f"{record.id} has no root message"
    return [m.text for m in stack.slack.replies(record.channel, record.root_ts)]


def ephemerals(stack: LocalStack, user: str) -> list[Ephemeral]:
    return stack.slack.ephemerals_for(user)


_FIRST_CTE = re.compile(r"WITH\s+\w+\s+AS\s*\(\s*", re.IGNORECASE)


def _leads_with(statement: str, prefix: str) -> bool:
    """``statement`` starts with ``prefix``, or its first CTE does (PostgreSQL runs a
    transition as a WITH chain whose first part is the request row's write)."""
    text = (
        _FIRST_CTE.sub("", statement.lstrip(), count=1)
        if statement.lstrip()[:4].upper() == "WITH"
        else statement.lstrip()
    )
    return text.upper().startswith(prefix.upper())


class StoreOutage:
    """An outage of one replica's store on either backend: while it is on, every
    transaction that Store opens raises StoreUnavailable (the error its own ``_begin``
    raises for a refused or reset connection), and nothing reaches the database."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.down = False
        self._losing: bool | None = None  # lose_commit_answer armed: committed or not
        self._lose_in: Any = None  # the connection whose transaction it hit
        self.answers_lost = 0  # commits that went through and were then told as failed
        self._lose_answer = False
        self._real = store._begin
        store._begin = self._begin  # type: ignore[method-assign]

    def start(self) -> None:
        self.down = True

    def start_after(self, statement_prefix: str) -> None:
        """Go down right after the first statement starting with ``statement_prefix`` runs:
        its own transaction goes on (and commits), the next one fails."""

        armed = [True]  # once: the listener stays (removing it while it runs is refused)

        def after(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            if armed[0] and _leads_with(statement, statement_prefix):
                armed[0] = False
                self.down = True

        event.listen(self.store.engine.sync_engine, "after_cursor_execute", after)

    def lose_answer_after(self, statement_prefix: str) -> None:
        """The transaction of the first statement starting with ``statement_prefix``
        commits, and its caller is told StoreUnavailable as if the connection broke before
        the commit's answer came back; the store is down from then on."""
        armed = [True]

        def after(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            if armed[0] and _leads_with(statement, statement_prefix):
                armed[0] = False
                self._lose_answer = True

        event.listen(self.store.engine.sync_engine, "after_cursor_execute", after)

    def end(self) -> None:
        self.down = False

    def lose_commit_answer(self, statement_prefix: str, *, committed: bool = True) -> None:
        """The next transaction that runs a statement starting with ``statement_prefix``
        ends in StoreUnavailable: after its COMMIT reached the database (``committed``: the
        answer lost) or in its place (rolled back); the store answers again at once."""
        self._losing = committed
        self._lose_in = None

        def after(conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            if self._losing is None or self._lose_in is not None:
                return
            if _leads_with(statement, statement_prefix):
                self._lose_in = conn

        event.listen(self.store.engine.sync_engine, "after_cursor_execute", after)

    def _lost(self, conn: AsyncConnection) -> bool:
        """Whether ``conn``'s transaction is the one whose answer is lost (then disarmed)."""
        if self._lose_in is None or self._lose_in is not conn.sync_connection:
            return False
        self._losing = self._lose_in = None
        return True

    @asynccontextmanager
    async def _begin(self) -> AsyncIterator[AsyncConnection]:
        if self.down:
            raise StoreUnavailable(self.store.database, "ConnectionRefusedError (test outage)")
        lost = False
        async with self._real() as conn:
            yield conn
            committed = self._losing
            lost = self._lost(conn)
            if lost and not committed:
                raise StoreUnavailable(self.store.database, "ConnectionResetError (before COMMIT)")
        if lost:
            raise StoreUnavailable(self.store.database, "ConnectionResetError (after COMMIT)")
        if self._lose_answer:  # committed: only the answer is lost
            self._lose_answer = False
            self.answers_lost += 1
            self.down = True
            raise StoreUnavailable(self.store.database, "ConnectionResetError (test: answer lost)")
