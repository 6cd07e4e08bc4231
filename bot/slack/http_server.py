"""Limits for the HTTP server of ``gpuops serve``: idle and slow-request timeouts, a cap on
open connections, quiet client disconnects, and 401 (never 500) for a Slack request body
that is not UTF-8 and not signed.

Usage::

    limits = HttpLimits()
    app = web.Application(middlewares=limit_middlewares(limits))
    runner = limited_runner(app, limits)
    await runner.setup()
    await LimitedSite(runner, host, port, max_connections=limits.max_connections).start()
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from aiohttp.web_protocol import RequestHandler
from pydantic import BaseModel, ConfigDict, Field

from bot.metrics import render_metrics
from bot.slack.startup import Readiness

log = logging.getLogger(__name__)


_BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
)
# A handler counts as opening for this long after its protocol was made; by then the
# event loop has long since called its connection_made (or the accept failed).
_OPENING_SECONDS = 1.0
# After a 408, aiohttp reads and drops what is left of the body for this long, then closes.
_LINGER_SECONDS = 1.0


class HttpLimits(BaseModel):
    """How long a client may take, and how many connections may be open at once."""

    model_config = ConfigDict(frozen=True)

    # A connection with no complete request (headers) for this long is closed: idle
    # keep-alive connections and requests whose headers trickle in alike.
    idle_seconds: float = Field(default=15.0, gt=0)
    # The body must have arrived this long after the headers (Slack sends it at once).
    body_seconds: float = Field(default=10.0, gt=0)
    # Beyond this many open connections a new one gets 503 and is closed.
    max_connections: int = Field(default=512, ge=1)


def limited_runner(
    app: web.Application, limits: HttpLimits, *, shutdown_timeout: float = 60.0
) -> web.AppRunner:
    """An AppRunner whose connections close after ``idle_seconds`` without a request, and
    at most ``_LINGER_SECONDS`` after answering a request whose body did not all arrive."""
    return web.AppRunner(
        app,
        access_log=None,
        keepalive_timeout=limits.idle_seconds,
        lingering_time=_LINGER_SECONDS,
        shutdown_timeout=shutdown_timeout,
    )


class _CappedFactory:
    """Makes aiohttp's request handlers while fewer than ``cap`` connections are open;
    beyond, a protocol that answers 503 and closes."""

    def __init__(self, server: web.Server, cap: int) -> None:
        self._server = server
        self._cap = cap
        # Handlers made whose connection_made has not yet registered them with the server.
        self._opening: dict[RequestHandler, float] = {}
        self.refused = 0

    def __call__(self) -> asyncio.Protocol:
        now = time.monotonic()
        open_now = set(self._server.connections)
        self._opening = {
            handler: made
            for handler, made in self._opening.items()
            if handler not in open_now and now - made < _OPENING_SECONDS
        }
        if len(open_now) + len(self._opening) >= self._cap:
            self.refused += 1
            return _Busy()
        handler = self._server()
        self._opening[handler] = now
        return handler


class _Busy(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(_BUSY_RESPONSE)
        transport.close()


class LimitedSite(web.TCPSite):
    """A TCPSite that refuses connections beyond ``max_connections`` with a 503."""

    def __init__(
        self, runner: web.AppRunner, host: str, port: int, *, max_connections: int
    ) -> None:
        super().__init__(runner, host, port)
        self._max_connections = max_connections
        self.factory: _CappedFactory | None = None

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        if server is None:
            raise RuntimeError("set the runner up before starting a site")
        self.factory = _CappedFactory(server, self._max_connections)
        self._server = await asyncio.get_running_loop().create_server(
            self.factory,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )


def limit_middlewares(limits: HttpLimits) -> list[Middleware]:
    """Read the body within ``body_seconds`` (else 408), answer 401 to a body that is not
    UTF-8, and log a client that went away in one quiet line.

    Slack signs UTF-8 text and its SDK's verifier cannot even read other bytes, so such a
    body cannot be shown to come from Slack: it is unauthenticated, not a server error."""

    @web.middleware
    async def read_body_in_time(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.body_exists:
            return await handler(request)
        try:
            async with asyncio.timeout(limits.body_seconds):
                body = await request.read()  # cached: the handler's read returns it
        except TimeoutError:
            log.info("closed a request whose body took over %g s", limits.body_seconds)
            return web.Response(status=408, headers={"Connection": "close"})
        except ConnectionError as exc:
            log.info("client went away while sending %s (%s)", request.path, type(exc).__name__)
            return web.Response(status=400, headers={"Connection": "close"})
        try:
            body.decode(request.charset or "utf-8")
        except (UnicodeDecodeError, LookupError):
            return web.Response(status=401)
        return await handler(request)

    return [read_body_in_time]


def add_ops_routes(
    app: web.Application,
    healthy: Callable[[], Awaitable[bool]],
    readiness: Readiness | None = None,
) -> None:
    """``GET /healthz`` (503 when not healthy or not ready yet, with the reason) and
    ``GET /metrics`` (Prometheus text)."""

    async def healthz(_: web.Request) -> web.Response:
        if readiness is not None and readiness.reason is not None:
            return web.json_response({"ok": False, "reason": readiness.reason}, status=503)
        ok = await healthy()
        return web.json_response({"ok": ok}, status=200 if ok else 503)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=render_metrics(),
            content_type="text/plain",
            headers={"X-Content-Type-Options": "nosniff"},
        )

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
