"""The ``gpuops`` console script: demo, serve, socket, mcp, simulate, check-config, audit."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bot.logs import LOG_FORMATS, configure_logging
from bot.serving import mcp_mode, serve, settings_or_exit, socket_mode

if TYPE_CHECKING:
    from bot.providers.catalog import Catalog

DEFAULT_PORT = 3000
# What ``gpuops --help`` shows (the module docstring is for readers of the code).
DESCRIPTION = (
    "gpuops: a Slack app to inspect and change GPU clusters at Together AI and E2E Networks. "
    "Settings come from the environment (and a .env file); see the README."
)


def _configure_logging(level: str) -> None:
    """GPUOPS_LOG_FORMAT (``text`` or ``json``) from the environment or the .env file."""
    log_format = (_env("GPUOPS_LOG_FORMAT") or "text").strip().lower()
    if log_format not in LOG_FORMATS:
        raise SystemExit(f"gpuops: GPUOPS_LOG_FORMAT must be text or json (got '{log_format}')")
    configure_logging(level, "json" if log_format == "json" else "text")


def _env(name: str) -> str | None:
    """A variable from the environment, else from the .env file (as Settings reads them)."""
    if name in os.environ:
        return os.environ[name]
    from dotenv import dotenv_values

    return dotenv_values(".env").get(name) if os.path.isfile(".env") else None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuops")
    except PackageNotFoundError:
        return "unknown (not installed)"


LOCAL_TOOLS_MISSING = (
    "gpuops: the {what} is not part of this installation ({module} is missing): the local "
    "tools (simulators, Slack stand-in, demo) are the gpuops-local distribution, which a "
    "server does not install; run it from a checkout of the repository (make demo)"
)


async def _simulate(host: str, port: int, transition_seconds: float) -> None:
    try:
        from bot.local.simulators.base import FAULT_USAGE
        from bot.local.simulators.e2e import E2ESimulator
        from bot.local.simulators.together import TogetherSimulator
    except ModuleNotFoundError as missing:  # e.g. the container image, a server only
        raise SystemExit(
            LOCAL_TOOLS_MISSING.format(what="simulator", module=missing.name)
        ) from None

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


def _add_audit_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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

    settings = settings_or_exit()
    assert isinstance(settings, Settings)
    try:
        if args.audit_command == "verify":
            code = asyncio.run(run_verify(settings, sys.stdout))
        else:
            code = asyncio.run(
                run_export(
                    settings, sys.stdout, since=args.since, project=args.project, fmt=args.format
                )
            )
        sys.stdout.flush()  # here, where a closed pipe is caught, not at the exit
        return code
    except BrokenPipeError:
        return _reader_left()
    except SinceError as exc:
        print(f"gpuops audit export: --since: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # one clear line, not a traceback
        print(f"gpuops audit: {redact(str(exc))}", file=sys.stderr)
        return 1


def _reader_left() -> int:
    """The reader of stdout closed it (``gpuops audit export | head``): stop quietly, as a
    program killed by SIGPIPE does (exit 128 + 13), with stdout pointed at /dev/null so
    that the interpreter's last flush finds nowhere to fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuops", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"gpuops {_version()}")
    parser.add_argument(
        "--log-level",
        default=None,
        help="DEBUG, INFO, WARNING or ERROR (default: GPUOPS_LOG_LEVEL, else INFO; "
        "WARNING for the demo)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="simulators + local Slack + the bot + a terminal chat")
    demo.add_argument("--script", help="run a file of chat lines non-interactively")
    demo.add_argument("--no-tour", action="store_true", help="skip the guided tour text")
    demo.add_argument(
        "--socket", action="store_true", help="connect the bot over Socket Mode, not HTTP"
    )
    serve = sub.add_parser("serve", help="HTTP mode: /slack/events, /healthz, /metrics")
    _listen_arguments(serve, "the address to listen on")
    sock = sub.add_parser("socket", help="Socket Mode; /healthz and /metrics on --port")
    _listen_arguments(sock, "the address of /healthz and /metrics")
    agents = sub.add_parser(
        "mcp", help="the MCP server for agents: stdio, or streamable HTTP with --port"
    )
    agents.add_argument(
        "--host", default="127.0.0.1", help="the address of --port (default: %(default)s)"
    )
    agents.add_argument(
        "--port", type=int, default=None, help="serve /mcp over HTTP on this port (default: stdio)"
    )
    sim = sub.add_parser("simulate", help="the provider simulators alone")
    sim.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)"
    )
    sim.add_argument(
        "--port",
        type=int,
        default=8700,
        help="Together's port; E2E on port+1 (default: %(default)s)",
    )
    sim.add_argument(
        "--transition-seconds",
        type=float,
        default=5.0,
        help="how long a cluster stays in a changing state (default: %(default)s)",
    )
    check = sub.add_parser("check-config", help="validate env and policy; print the grants table")
    check.add_argument("--policy", metavar="FILE", help="the policy file (default: GPUOPS_POLICY)")
    check.add_argument(
        "--online",
        action="store_true",
        help="also run auth.test, check the bot is in each notify_channel, and make one "
        "read per project with its credentials",
    )
    _add_audit_parser(sub)
    return parser


def _listen_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--host",
        default="0.0.0.0",  # noqa: S104 - a server binds all interfaces
        help=f"{what} (default: %(default)s, every interface)",
    )
    port = int(os.environ.get("GPUOPS_PORT") or DEFAULT_PORT)
    parser.add_argument(
        "--port", type=int, default=port, help="its port (default: GPUOPS_PORT, else 3000)"
    )


def _check_config(policy: str | None, online: bool, catalog: Catalog) -> int:
    from pathlib import Path

    from bot.check_config import run_check_config, run_check_config_online
    from bot.config import Settings

    settings = settings_or_exit()
    assert isinstance(settings, Settings)
    if policy is not None:
        settings = settings.model_copy(update={"gpuops_policy": Path(policy)})
    if not online:
        return run_check_config(settings, catalog, sys.stdout)
    configure_logging("ERROR", "text")  # the report is the output; libraries stay quiet
    return asyncio.run(run_check_config_online(settings, catalog, sys.stdout))


def _demo(script: str | None, tour: bool, socket: bool) -> int:
    try:
        from bot.local.demo.console import run_demo
    except ModuleNotFoundError as missing:  # e.g. the container image, a server only
        raise SystemExit(LOCAL_TOOLS_MISSING.format(what="demo", module=missing.name)) from None
    return asyncio.run(run_demo(script=script, tour=tour, socket=socket))


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    catalog = _providers()
    if args.command == "check-config":
        raise SystemExit(_check_config(args.policy, args.online, catalog))
    if args.command == "demo":
        _configure_logging(args.log_level or "WARNING")
        raise SystemExit(_demo(args.script, not args.no_tour, args.socket))
    if args.command == "audit":
        _configure_logging(args.log_level or "WARNING")  # stdout is the export itself
        raise SystemExit(_audit(args))
    # --log-level wins; else GPUOPS_LOG_LEVEL (SPEC-style env configuration); else INFO.
    _configure_logging(args.log_level or _env("GPUOPS_LOG_LEVEL") or "INFO")
    try:
        if args.command == "serve":
            asyncio.run(serve(args.host, args.port, catalog))
        elif args.command == "socket":
            asyncio.run(socket_mode(args.host, args.port, catalog))
        elif args.command == "mcp":
            asyncio.run(mcp_mode(args.host, args.port, catalog))
        else:
            asyncio.run(_simulate(args.host, args.port, args.transition_seconds))
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # a start-up failure is one clear line, not a traceback
        from bot.redact import redact

        raise SystemExit(f"gpuops: {redact(str(exc))}") from None


def _providers() -> Catalog:
    """The provider catalog, read once here and handed on. Every command needs it: one
    installed package that registers a broken provider is named in one line."""
    from bot.providers.catalog import CatalogError
    from bot.providers.installed import load_catalog
    from bot.redact import redact

    try:
        return load_catalog()
    except CatalogError as exc:
        raise SystemExit(f"gpuops: {redact(str(exc))}") from None


if __name__ == "__main__":
    main()
