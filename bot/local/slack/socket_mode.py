"""Socket Mode in the Slack stand-in: ``apps.connections.open`` hands out a one-use
``ws://127.0.0.1:PORT/socket-mode/<ticket>`` URL; on connect the app gets ``hello``, then
envelopes (``slash_commands``, ``interactive``, ``events_api``) it acknowledges by
``envelope_id`` (with an optional ``payload``, the answer), as on Slack. The hub can ask
connections to refresh (``disconnect`` messages) or drop them abruptly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import WSMsgType, web

from bot.local.slack.models import JsonDict, random_id

logger = logging.getLogger(__name__)

EnvelopeType = Literal["slash_commands", "interactive", "events_api"]
DisconnectReason = Literal["refresh_requested", "link_disabled", "warning"]
TICKET_TTL_SECONDS = 30.0  # a URL from apps.connections.open is good for a short while only


@dataclass
class SocketAck:
    """What the app answered to one envelope: ``payload`` is the response it carried (a
    slash command's message, a view_submission's ``response_action`` …), None if bare."""

    envelope_id: str
    payload: Any
    at: float


@dataclass
class _Connection:
    id: str
    socket: web.WebSocketResponse
    request: web.Request
    opened_at: float
    envelopes_sent: list[str] = field(default_factory=list)


class SocketModeHub:
    """The Socket Mode side of a ``FakeSlack``: serves the WebSocket route and delivers
    envelopes to the newest connected app session."""

    def __init__(self, app_id: str, base_url: Callable[[], str]) -> None:
        self.app_id = app_id
        self._base_url = base_url
        self._tickets: dict[str, float] = {}
        self.connections: list[_Connection] = []
        self.opened = 0
        """How many connections were ever accepted (a reconnect makes it grow)."""
        self.acks: list[SocketAck] = []
        self._pending: dict[str, asyncio.Future[SocketAck]] = {}
        self._changed = asyncio.Event()

    # -- apps.connections.open and the WebSocket route ----------------------------------------

    def new_url(self) -> str:
        ticket = secrets.token_urlsafe(18)
        self._tickets[ticket] = time.monotonic()
        return self._base_url().replace("http://", "ws://", 1) + f"/socket-mode/{ticket}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        issued = self._tickets.pop(request.match_info["ticket"], None)
        if issued is None or time.monotonic() - issued > TICKET_TTL_SECONDS:
            return web.Response(status=401, text="invalid_ticket")
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        connection = _Connection(
            id=random_id("SM"), socket=socket, request=request, opened_at=time.monotonic()
        )
        self.connections.append(connection)
        self.opened += 1
        await socket.send_json(self._hello())
        self._notify()
        try:
            async for message in socket:
                if message.type == WSMsgType.TEXT:
                    self._receive(message.data)
        finally:
            if connection in self.connections:
                self.connections.remove(connection)
            self._notify()
        return socket

    def _hello(self) -> JsonDict:
        return {
            "type": "hello",
            "num_connections": len(self.connections),
            "debug_info": {
                "host": "localslack",
                "build_number": 1,
                "approximate_connection_time": 18060,
            },
            "connection_info": {"app_id": self.app_id},
        }

    def _receive(self, raw: str) -> None:
        try:
            message = json.loads(raw)
        except ValueError:
            logger.warning("socket mode: a message that is not JSON was ignored")
            return
        envelope_id = message.get("envelope_id") if isinstance(message, dict) else None
        if not isinstance(envelope_id, str):
            return
        ack = SocketAck(envelope_id=envelope_id, payload=message.get("payload"), at=time.time())
        self.acks.append(ack)
        future = self._pending.pop(envelope_id, None)
        if future is not None and not future.done():
            future.set_result(ack)

    # -- delivering envelopes --------------------------------------------------------------

    async def wait_connected(self, *, within: float = 5.0, opened: int = 1) -> None:
        """Wait until an app session is connected and at least ``opened`` connections have
        been accepted in all (``opened=n+1`` waits for a reconnect)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while not (self.connections and self.opened >= opened):
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError("socket mode: no app connected in time")
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)

    async def send(
        self,
        kind: EnvelopeType,
        payload: JsonDict,
        *,
        accepts_response_payload: bool,
        retry_attempt: int = 0,
        retry_reason: str = "",
        connect_within: float = 5.0,
    ) -> asyncio.Future[SocketAck]:
        """Send one envelope to the newest connection; the future resolves with its ack."""
        await self.wait_connected(within=connect_within)
        connection = self.connections[-1]
        envelope_id = random_id("", 8).lower() + "-" + secrets.token_hex(8)
        envelope: JsonDict = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": kind,
            "accepts_response_payload": accepts_response_payload,
        }
        if kind == "events_api":
            envelope["retry_attempt"] = retry_attempt
            envelope["retry_reason"] = retry_reason
        future: asyncio.Future[SocketAck] = asyncio.get_running_loop().create_future()
        self._pending[envelope_id] = future
        connection.envelopes_sent.append(envelope_id)
        await connection.socket.send_json(envelope)
        return future

    # -- what Slack does to connections ------------------------------------------------------

    async def disconnect(self, reason: DisconnectReason = "refresh_requested") -> int:
        """Ask every connection to go (Slack's ``disconnect`` message), then close it, as
        Slack does when it refreshes or disables a link. Returns how many were told."""
        told = list(self.connections)
        for connection in told:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await connection.socket.send_json(
                    {"type": "disconnect", "reason": reason, "debug_info": {"host": "localslack"}}
                )
        for connection in told:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await connection.socket.close()
        return len(told)

    def drop(self) -> int:
        """Cut every connection without a closing handshake (a network failure)."""
        dropped = list(self.connections)
        for connection in dropped:
            transport = connection.request.transport
            if transport is not None:
                transport.abort()
        return len(dropped)

    async def close_all(self) -> None:
        for connection in list(self.connections):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await connection.socket.close()
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
