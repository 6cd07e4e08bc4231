"""The ack-latency baseline: a slack_bolt AsyncApp that only acks ``/gpu``, with the same
signing secret and Web API client settings as gpuops, served the way gpuops serves
(aiohttp, ``POST /slack/events``, ``GET /healthz``, no access log).

    python -m bench.bare_bolt --host 127.0.0.1 --port 3100

Reads SLACK_SIGNING_SECRET, SLACK_BOT_TOKEN and SLACK_API_URL from the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient


def build_app(signing_secret: str, token: str, api_url: str) -> AsyncApp:
    client = AsyncWebClient(token=token, base_url=api_url.rstrip("/") + "/", timeout=10)
    app = AsyncApp(
        client=client,
        signing_secret=signing_secret,
        request_verification_enabled=True,
        raise_error_for_unhandled_request=False,
    )

    @app.command("/gpu")
    async def ack_only(ack: Any) -> None:
        await ack()

    return app


def web_app(bolt: AsyncApp) -> web.Application:
    async def events(request: web.Request) -> web.Response:
        response = await bolt.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(response)

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application(client_max_size=1024 * 1024)
    app.router.add_post("/slack/events", events)
    app.router.add_get("/healthz", healthz)
    return app


async def serve(host: str, port: int) -> None:
    bolt = build_app(
        os.environ["SLACK_SIGNING_SECRET"],
        os.environ["SLACK_BOT_TOKEN"],
        os.environ.get("SLACK_API_URL", "https://slack.com/api/"),
    )
    runner = web.AppRunner(web_app(bolt), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bare_bolt", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args()
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.WARNING))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
