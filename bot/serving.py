"""Serving gpuops: the HTTP server (``gpuops serve``) and Socket Mode (``gpuops socket``),
from the settings to a clean stop on SIGTERM/SIGINT (``bot.cli`` reads the command line)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp.web import AppRunner

    from bot.providers.catalog import Catalog
    from bot.signals import Hangup


def settings_or_exit() -> object:
    from pydantic import ValidationError

    from bot.config import Settings

    try:
        return Settings()
    except ValidationError as exc:
        errors = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" for e in exc.errors()
        )
        raise SystemExit(f"gpuops: configuration error: {errors}") from None


def stop_signal(hangup: Hangup | None = None) -> asyncio.Event:
    """An event set on SIGTERM or SIGINT, so that the server shuts down cleanly (closes its
    listener, background tasks, provider clients and store) and exits 0. SIGHUP runs the
    ``hangup`` callbacks and never stops the server."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    handlers: list[tuple[signal.Signals, Callable[[], None]]] = [
        (signal.SIGTERM, stop.set),
        (signal.SIGINT, stop.set),
    ]
    if hangup is not None and hasattr(signal, "SIGHUP"):
        handlers.append((signal.SIGHUP, hangup.signal))
    for sig, handler in handlers:
        with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows
            loop.add_signal_handler(sig, handler)
    return stop


async def unless_stopped(step: Awaitable[object], stop: asyncio.Event) -> bool:
    """Run a start-up step that may wait on Slack (True when done), unless a stop signal
    comes first (False); its exception (e.g. TokenRefused) propagates."""
    starting = asyncio.ensure_future(step)
    stopping = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if starting not in done:
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        return False
    stopping.cancel()
    starting.result()
    return True


def shutdown_grace(settings: object) -> float:
    """How long a stopping bot lets a change being sent finish: one provider call's budget."""
    return float(getattr(settings, "gpuops_total_timeout", 30.0)) + 5.0


# A full collection after this many of the middle generation's (Python's default: 10).
FULL_COLLECTION_EVERY = 100


def freeze_startup_heap() -> None:
    """Exempt what start-up built (modules, schemas, policy, clients) from garbage
    collection: a full collection walked all of it, pausing the event loop 30-45 ms under
    load (bench/, ack p99 at 50 commands in flight: 64 -> 25 ms).

    Then make full collections rare. With 50-200 changes in flight their coroutines, tasks
    and contexts outlive the young collections, so a full one came every second or so and
    still paused the loop 15-90 ms (seven in a bench run of 50 and 200 in flight, none
    with this). Young collections, a few ms at most, run as before, and whatever a full one
    would free is freed by the next one."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)


def listening(runner: AppRunner, host: str, port: int) -> int:
    """Log where the server listens (before it is ready) and return its port: the one the
    system chose when ``--port 0`` asked it to."""
    bound = next((int(a[1]) for a in runner.addresses if isinstance(a, tuple)), port)
    logging.getLogger("gpuops").info("listening on http://%s:%d", host, bound)
    return bound


async def serve(host: str, port: int, catalog: Catalog) -> None:
    from bot.config import Settings
    from bot.runtime import Runtime
    from bot.slack.http_server import HttpLimits, LimitedSite, limited_runner

    settings = settings_or_exit()
    assert isinstance(settings, Settings)
    settings.require_for("serve")
    runtime = await Runtime.create(settings, catalog=catalog)
    runtime.readiness.wait_for("starting")
    limits = HttpLimits()
    runner = limited_runner(runtime.web_app(limits), limits)
    await runner.setup()
    log = logging.getLogger("gpuops")
    try:
        stop = stop_signal(runtime.hangup)
        await LimitedSite(runner, host, port, max_connections=limits.max_connections).start()
        port = listening(runner, host, port)
        if not await unless_stopped(runtime.start(), stop):
            return
        freeze_startup_heap()
        log.info("serving on http://%s:%d/slack/events", host, port)
        await stop.wait()
        log.info("stopping")
    finally:
        await runner.cleanup()
        await runtime.close(grace=shutdown_grace(settings))


async def mcp_mode(host: str, port: int | None, catalog: Catalog) -> None:
    """``gpuops mcp``: the MCP server for agents (SPEC §15) on this bot's core and store,
    over stdio with ``GPUOPS_MCP_TOKEN``, or over streamable HTTP at ``/mcp`` on ``port``
    (bearer tokens). It opens proposals; their Confirm and approvals arrive at
    ``gpuops serve`` or ``socket`` on the same database, which run them."""
    from aiohttp import web

    from bot.config import Settings
    from bot.mcp.http import McpEndpoint, bearer_token, serving
    from bot.mcp.server import build_server
    from bot.runtime import Runtime
    from bot.slack.http_server import add_ops_routes

    settings = settings_or_exit()
    assert isinstance(settings, Settings)
    settings.require_for("mcp")
    token = settings.gpuops_mcp_token
    if port is None and token is None:
        raise SystemExit(
            "gpuops: GPUOPS_MCP_TOKEN is not set; `gpuops mcp` over stdio acts with that "
            "personal token (make one with `/gpu token new` in Slack)"
        )
    runtime = await Runtime.create(settings, catalog=catalog)
    log = logging.getLogger("gpuops")
    try:
        if port is None:
            assert token is not None
            secret = token.get_secret_value()
            server = build_server(runtime.mcp_tools(lambda _ctx: secret))
            log.info("serving MCP over stdio")
            await server.run_stdio_async()
            return
        app = web.Application(client_max_size=1024 * 1024)
        McpEndpoint(build_server(runtime.mcp_tools(bearer_token))).install(app)
        add_ops_routes(app, runtime._healthy)
        stop = stop_signal(runtime.hangup)
        async with serving(app, host, port) as bound:
            log.info("serving MCP on http://%s:%d/mcp", host, bound)
            await stop.wait()
    finally:
        await runtime.close()


async def socket_mode(host: str, port: int, catalog: Catalog) -> None:
    from aiohttp import web

    from bot.config import Settings
    from bot.runtime import Runtime
    from bot.slack.deadline import DeadlineSocketModeHandler
    from bot.slack.http_server import add_ops_routes

    settings = settings_or_exit()
    assert isinstance(settings, Settings)
    settings.require_for("socket")
    assert settings.slack_app_token is not None
    runtime = await Runtime.create(settings, catalog=catalog)
    runtime.readiness.wait_for("starting")
    ops_app = web.Application()
    add_ops_routes(ops_app, runtime._healthy, runtime.readiness)
    runner = web.AppRunner(ops_app, access_log=None)
    await runner.setup()
    handler = DeadlineSocketModeHandler(runtime.bolt, settings.slack_app_token.get_secret_value())
    try:
        stop = stop_signal(runtime.hangup)
        await web.TCPSite(runner, host, port).start()
        port = listening(runner, host, port)
        if not await unless_stopped(runtime.start(), stop):
            return
        freeze_startup_heap()
        runtime.readiness.wait_for("connecting to Slack in Socket Mode")
        if not await unless_stopped(handler.connect_async(), stop):  # type: ignore[no-untyped-call]
            return
        runtime.readiness.set_ready()
        logging.getLogger("gpuops").info("connected in Socket Mode; health on :%d", port)
        await stop.wait()
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]
        await runner.cleanup()
        await runtime.close(grace=shutdown_grace(settings))
