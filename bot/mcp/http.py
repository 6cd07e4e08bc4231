"""Streamable HTTP for the MCP server inside aiohttp (``/mcp`` on ``gpuops serve``, and
``gpuops mcp --port``): each POST is handed, as an ASGI request, to the SDK's session
manager in stateless JSON mode, so a request stands alone and any replica answers it.

A request without ``Authorization: Bearer …`` is answered 401 before the SDK sees it; the
token itself is checked at each tool call (bot.mcp.server), where a refusal can say why."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from multidict import CIMultiDict
from starlette.types import Message, Scope

MCP_PATH = "/mcp"
_BEARER = "bearer "


def bearer_token(ctx: Context) -> str | None:
    """The token of an HTTP call's ``Authorization: Bearer`` header."""
    headers = ctx.headers or {}
    value = str(headers.get("authorization", ""))
    return value[len(_BEARER) :].strip() or None if value.lower().startswith(_BEARER) else None


class McpEndpoint:
    """The ``/mcp`` route: the SDK's session manager run for the app's lifetime."""

    def __init__(self, server: MCPServer[object]) -> None:
        self.manager = StreamableHTTPSessionManager(
            app=server._lowlevel_server, json_response=True, stateless=True
        )

    def install(self, app: web.Application, path: str = MCP_PATH) -> None:
        app.router.add_route("*", path, self.handle)
        app.cleanup_ctx.append(self._running)

    async def _running(self, _: web.Application) -> AsyncIterator[None]:
        # The manager's task group is entered and left in one task of its own (anyio's
        # rule), which lives as long as the app.
        started, stop = asyncio.Event(), asyncio.Event()

        async def run() -> None:
            async with self.manager.run():
                started.set()
                await stop.wait()

        task = asyncio.create_task(run(), name="mcp-session-manager")
        waiting = asyncio.ensure_future(started.wait())
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            waiting.cancel()
            task.result()  # its failure to start, raised here
        try:
            yield
        finally:
            stop.set()
            await task

    async def handle(self, request: web.Request) -> web.StreamResponse:
        authorization = request.headers.get("Authorization", "")
        if not authorization.lower().startswith(_BEARER) or not authorization[7:].strip():
            return web.json_response(
                {
                    "error": "unauthorized",
                    "message": "send `Authorization: Bearer <token>`; make a token with "
                    "`/gpu token new` in Slack.",
                },
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="gpuops"'},
            )
        return await _asgi(self.manager, request)


async def _asgi(manager: StreamableHTTPSessionManager, request: web.Request) -> web.StreamResponse:
    """Run one aiohttp request through the ASGI app and stream its answer back."""
    body = await request.read()
    done = asyncio.Event()
    delivered = False
    host, port = [*request.host.split(":", 1), "80"][:2]
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.encode("latin-1"),
        "query_string": request.query_string.encode("latin-1"),
        "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": (request.remote or "", 0),
        "server": (host, int(port) if port.isdigit() else 80),
        "state": {},
    }

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    response: web.StreamResponse | None = None

    async def send(message: Message) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            headers = CIMultiDict(
                (k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])
            )
            response = web.StreamResponse(status=int(message["status"]), headers=headers)
            await response.prepare(request)
        elif message["type"] == "http.response.body" and response is not None:
            await response.write(message.get("body", b""))
            if not message.get("more_body", False):
                await response.write_eof()

    try:
        await manager.handle_request(scope, receive, send)
    finally:
        done.set()
    if response is None:
        return web.Response(status=500, text="the MCP server gave no answer")
    return response


@contextlib.asynccontextmanager
async def serving(app: web.Application, host: str, port: int) -> AsyncIterator[int]:
    """Serve ``app`` on ``host:port`` (0: any free port) until the block ends; the port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    try:
        bound = next((int(a[1]) for a in runner.addresses if isinstance(a, tuple)), port)
        yield bound
    finally:
        await runner.cleanup()
