"""The ``gpuops`` console script: demo, serve, socket, simulate, check-config, audit."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bot.redact import install_log_redaction


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    install_log_redaction()


def _settings() -> object:
    from pydantic import ValidationError

    from bot.config import Settings

    try:
        return Settings()
    except ValidationError as exc:
        errors = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" for e in exc.errors()
        )
        raise SystemExit(f"gpuops: configuration error: {errors}") from None


def _stop_signal() -> asyncio.Event:
    """An event set on SIGTERM or SIGINT, so that the server shuts down cleanly (closes its
    listener, background tasks, provider clients and store) and exits 0."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows
            loop.add_signal_handler(sig, stop.set)
    return stop


def _reload_on_hangup(reload: Callable[[], Awaitable[object]]) -> None:
    """SIGHUP reads the policy file again (SPEC §8); it never stops the process."""
    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task[object]] = set()

    def hangup() -> None:
        task = asyncio.ensure_future(reload())
        pending.add(task)
        task.add_done_callback(pending.discard)

    with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows
        loop.add_signal_handler(signal.SIGHUP, hangup)


def _shutdown_grace(settings: object) -> float:
    """How long a stopping bot lets a change being sent finish: one provider call's budget."""
    return float(getattr(settings, "gpuops_total_timeout", 30.0)) + 5.0


def _freeze_startup_heap() -> None:
    """Exempt what start-up built (modules, schemas, policy, clients) from garbage
    collection: a full collection walked all of it, pausing the event loop 30-45 ms under
    load (bench/, ack p99 at 50 commands in flight: 64 -> 25 ms)."""
    gc.collect()
    gc.freeze()


async def _serve(host: str, port: int) -> None:
    from bot.config import Settings
    from bot.runtime import Runtime
    from bot.slack.http_server import HttpLimits, LimitedSite, limited_runner

    settings = _settings()
    assert isinstance(settings, Settings)
    settings.require_for("serve")
    runtime = await Runtime.create(settings)
    await runtime.start_background()
    _reload_on_hangup(runtime.reload_policy)
    _freeze_startup_heap()
    limits = HttpLimits()
    runner = limited_runner(runtime.web_app(limits), limits)
    await runner.setup()
    await LimitedSite(runner, host, port, max_connections=limits.max_connections).start()
    logging.getLogger("gpuops").info("serving on http://%s:%d/slack/events", host, port)
    try:
        await _stop_signal().wait()
        logging.getLogger("gpuops").info("stopping")
    finally:
        await runner.cleanup()
        await runtime.close(grace=_shutdown_grace(settings))


async def _socket(host: str, port: int) -> None:
    from aiohttp import web

    from bot.config import Settings
    from bot.runtime import Runtime, add_ops_routes
    from bot.slack.deadline import DeadlineSocketModeHandler

    settings = _settings()
    assert isinstance(settings, Settings)
    settings.require_for("socket")
    assert settings.slack_app_token is not None
    runtime = await Runtime.create(settings)
    await runtime.start_background()
    _reload_on_hangup(runtime.reload_policy)
    _freeze_startup_heap()
    ops_app = web.Application()
    add_ops_routes(ops_app, runtime._healthy)
    runner = web.AppRunner(ops_app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    handler = DeadlineSocketModeHandler(runtime.bolt, settings.slack_app_token.get_secret_value())
    try:
        await handler.connect_async()  # type: ignore[no-untyped-call]
        logging.getLogger("gpuops").info("connected in Socket Mode; health on :%d", port)
        await _stop_signal().wait()
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]
        await runner.cleanup()
        await runtime.close(grace=_shutdown_grace(settings))


async def _simulate(host: str, port: int, transition_seconds: float) -> None:
    from bot.local.simulators.base import FAULT_USAGE
    from bot.local.simulators.e2e import E2ESimulator
    from bot.local.simulators.together import TogetherSimulator

    together = TogetherSimulator(transition_seconds=transition_seconds)
    e2e = E2ESimulator(transition_seconds=transition_seconds)
    await together.start(host, port)
    await e2e.start(host, port + 1 if port else 0)
    # gpuops appends compute/… to a base ending in /v1; the official together SDK (3.x)
    # appends /v1/compute/… itself, to the host alone (and it reads TOGETHER_BASE_URL too).
    sdk_base = together.base_url.removesuffix("/v1")
    print(
        f"Together simulator: TOGETHER_BASE_URL={together.base_url}  (API key {together.api_key})"
    )
    print(f'  the official together SDK takes the host alone: Together(base_url="{sdk_base}")')
    print(f"E2E simulator:      E2E_BASE_URL={e2e.base_url}")
    print(f"  apikey {e2e.api_key}, token {e2e.auth_token}")
    print(f"Fault injection: {FAULT_USAGE}")
    print(
        "Controls: POST <host>/_sim/clusters/{id}/degrade | /restore, DELETE /_sim/clusters/{id},"
    )
    print(
        "  Together: POST <host>/_sim/clusters/{id}/remediations, /_sim/remediations/{id}/resolve"
    )
    sys.stdout.flush()
    try:
        await asyncio.Event().wait()
    finally:
        await together.stop()
        await e2e.stop()


def _add_audit_parser(sub: Any) -> None:
    audit = sub.add_parser("audit", help="the audit trail: export it, verify its hash chain")
    verbs = audit.add_subparsers(dest="audit_command", required=True)
    export = verbs.add_parser("export", help="write the entries with their hashes to stdout")
    export.add_argument("--since", help="30m, 2h, 1d or an RFC 3339 time (default: all)")
    export.add_argument("--project", help="only this project's entries")
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    verbs.add_parser("verify", help="walk the hash chain; exit 1 naming the first break")


def _audit(args: argparse.Namespace) -> int:
    from bot.audit_cli import run_export, run_verify
    from bot.config import Settings
    from bot.core.since import SinceError
    from bot.redact import redact

    settings = _settings()
    assert isinstance(settings, Settings)
    try:
        if args.audit_command == "verify":
            return asyncio.run(run_verify(settings, sys.stdout))
        return asyncio.run(
            run_export(
                settings, sys.stdout, since=args.since, project=args.project, fmt=args.format
            )
        )
    except SinceError as exc:
        print(f"gpuops audit export: --since: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # one clear line, not a traceback
        print(f"gpuops audit: {redact(str(exc))}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="gpuops", description=__doc__)
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO, WARNING (default INFO)")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="simulators + local Slack + the bot + a terminal chat")
    demo.add_argument("--script", help="run a file of chat lines non-interactively")
    demo.add_argument("--no-tour", action="store_true", help="skip the guided tour text")
    demo.add_argument(
        "--socket", action="store_true", help="connect the bot over Socket Mode, not HTTP"
    )
    serve = sub.add_parser("serve", help="HTTP mode: /slack/events, /healthz, /metrics")
    serve.add_argument("--host", default="0.0.0.0")  # noqa: S104 - a server binds all interfaces
    serve.add_argument("--port", type=int, default=3000)
    sock = sub.add_parser("socket", help="Socket Mode; /healthz and /metrics on --port")
    sock.add_argument("--host", default="0.0.0.0")  # noqa: S104
    sock.add_argument("--port", type=int, default=3000)
    sim = sub.add_parser("simulate", help="the provider simulators alone")
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--port", type=int, default=8700, help="Together; E2E on port+1")
    sim.add_argument("--transition-seconds", type=float, default=5.0)
    sub.add_parser("check-config", help="validate env and policy; print the grants table")
    _add_audit_parser(sub)
    args = parser.parse_args(argv)

    if args.command == "check-config":
        from bot.check_config import run_check_config
        from bot.config import Settings

        settings = _settings()
        assert isinstance(settings, Settings)
        raise SystemExit(run_check_config(settings, sys.stdout))
    if args.command == "demo":
        from bot.local.demo.console import run_demo

        _configure_logging(args.log_level or "WARNING")
        raise SystemExit(
            asyncio.run(run_demo(script=args.script, tour=not args.no_tour, socket=args.socket))
        )
    if args.command == "audit":
        _configure_logging(args.log_level or "WARNING")  # stdout is the export itself
        raise SystemExit(_audit(args))
    # --log-level wins; else GPUOPS_LOG_LEVEL (SPEC-style env configuration); else INFO.
    _configure_logging(args.log_level or os.environ.get("GPUOPS_LOG_LEVEL") or "INFO")
    try:
        if args.command == "serve":
            asyncio.run(_serve(args.host, args.port))
        elif args.command == "socket":
            asyncio.run(_socket(args.host, args.port))
        else:
            asyncio.run(_simulate(args.host, args.port, args.transition_seconds))
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # a start-up failure is one clear line, not a traceback
        from bot.redact import redact

        raise SystemExit(f"gpuops: {redact(str(exc))}") from None


if __name__ == "__main__":
    main()
