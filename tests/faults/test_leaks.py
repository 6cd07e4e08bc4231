"""The leak scan: run the main scenarios with distinctive secret values — reads, lists, a
Together update, an E2E action with approval, refusals, modals, a Slack API error, and
provider faults that put URLs into httpx exceptions (connection refused, timeout, 500,
malformed) — then look for each secret, byte for byte, everywhere it must not be:

- every log record of every logger at DEBUG (httpx, httpcore, aiohttp, slack_bolt,
  slack_sdk included), as the handler formats it and in all its attributes;
- every Slack Web API call body, response_url post, message, ephemeral and view;
- every row of every table of the state store;
- every exception text (ProviderError texts, their chained causes, tracebacks);
- the simulators' recorded requests, except the auth parts where a secret must be;
- ``/metrics`` and ``/healthz``.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from bot.core.store import RequestState, metadata
from bot.local.demo.stack import LocalStack
from bot.local.simulators.base import Fault, FaultKind, SimulatorServer
from bot.logs import JsonFormatter
from bot.providers.errors import ProviderError
from bot.redact import install_log_redaction
from tests.support.reliability import (
    E2E_ATTACH,
    FAST,
    INCIDENT,
    TOGETHER_SCALE_UP,
    click,
    command,
    newest_request,
    refuse_connections,
    settle,
    wait_state,
    wait_terminal,
)

StackFactory = Callable[..., Awaitable[LocalStack]]
# Two attempts and a shorter timeout: the timeouts scanned here need not be retried thrice.
LEAK_STACK = {**FAST, "total_timeout": 0.4, "provider_attempts": 2}

SECRETS = {
    "bot_token": "xoxb-leakscan-7a1c9e5f3b",
    "signing_secret": "leakscan-signing-4b8a2c7e91",
    "together_key": "leakscan-together-c0ffee11",
    "e2e_key": "leakscan-e2e-apikey-d00dfeed",
    "e2e_token": "leakscan-e2e-token-facade42",
}
NOISY_LOGGERS = (
    "httpx",
    "httpcore",
    "aiohttp",
    "aiohttp.access",
    "aiohttp.client",
    "aiohttp.server",
    "slack_bolt",
    "slack_sdk",
    "stamina",
    "asyncio",
    "sqlalchemy",
)


class Everything(logging.Handler):
    """Keeps every record, formatted as text and as JSON (GPUOPS_LOG_FORMAT=json), plus all
    its attributes (extras included)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.json = JsonFormatter()
        self.texts: list[str] = []
        self.json_lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(self.format(record))
        self.json_lines.append(self.json.format(record))
        self.texts.append(self.json_lines[-1])
        self.texts.append(repr({k: v for k, v in record.__dict__.items() if k != "exc_info"}))


@pytest.fixture
def every_log() -> Iterator[Everything]:
    """A root handler at DEBUG, installed the way `gpuops serve` installs its own: before
    the redaction filter is attached to the root handlers."""
    handler = Everything()
    root = logging.getLogger()
    saved = (root.level, {n: logging.getLogger(n).level for n in NOISY_LOGGERS})
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    install_log_redaction()
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        for name, level in saved[1].items():
            logging.getLogger(name).setLevel(level)


def debug_everywhere() -> None:
    # After the runtime has started (it quiets httpx to WARNING by default): everything.
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)


class Seen:
    """Every text gathered outside the logs, with where it came from."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self.raised = 0

    def add(self, where: str, value: Any) -> None:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        self.items.append((where, text))

    def exception(self, where: str, exc: BaseException) -> None:
        chain: BaseException | None = exc
        while chain is not None:  # the chained causes too, though they are suppressed
            self.add(where, f"{type(chain).__name__}: {chain!s} {chain!r}")
            chain = chain.__cause__ or chain.__context__
        self.add(where, "".join(traceback.format_exception(exc)))
        if isinstance(exc, ProviderError):
            self.add(where, [exc.user_message, exc.provider_message])


async def scenarios(stack: LocalStack, seen: Seen) -> None:
    """The main paths, successes and failures."""
    for user, text in [
        ("U04DAVE", "help"),
        ("U04DAVE", "list"),
        ("U04DAVE", "show together-prod tc-h100-reserved"),
        ("U04DAVE", "show e2e-delhi 101"),
        ("U06MALLORY", "show together-prod tc-h100-reserved"),  # no grant
        ("U05ERIN", "update together-prod tc-h200-ondemand num_gpus=16"),  # a viewer
        ("U04DAVE", "update together-prod tc-h100-reserved num_preemptible_gpus=12"),  # rule
        ("U04DAVE", "action e2e-delhi 102 restart_workers"),  # not Running
        ("U04DAVE", "show nope x"),
    ]:
        seen.add(f"reply to {text}", (await command(stack, text, user=user)).text)

    # A Together update that runs, and an E2E action approved by a second person.
    await command(stack, TOGETHER_SCALE_UP)
    await command(stack, "action e2e-delhi 103 scale_cluster additional_nodes=1")
    pending = await newest_request(stack)
    assert pending is not None
    await wait_state(stack, pending.id, {RequestState.PENDING})
    await click(stack, pending.id)
    assert (await wait_terminal(stack, pending.id)).state is RequestState.SUCCEEDED

    # A form, opened and filled.
    await stack.sender.command("U04DAVE", INCIDENT, "update together-prod tc-h100-reserved")
    view = await stack.slack.wait_for(
        lambda: next(
            (v for v in stack.slack.views.values() if v.open and "num_gpus" in str(v.blocks)),
            None,
        )
    )
    await stack.sender.view_submission("U04DAVE", view.id, {"num_gpus": "24"})
    await settle(stack)

    # Provider faults on reads, writes and lists, both providers; and the exceptions the
    # clients raise for them, caught before anything formats them.
    e2e_change = "action e2e-delhi 101 add_security_group security_groups_ids=602"
    faults: list[tuple[FaultKind, dict[str, Any]]] = [
        (FaultKind.SERVER_ERROR, {"status": 500}),
        (FaultKind.MALFORMED, {}),
        (FaultKind.LATENCY, {"seconds": 0.8}),
        (FaultKind.APPLY_THEN_FAIL, {"status": 502}),
    ]
    for round_no, (kind, extra) in enumerate(faults):
        together_change = f"update together-prod tc-h200-ondemand num_gpus={24 + 8 * round_no}"
        sims: list[tuple[SimulatorServer, str, str]] = [
            (stack.together, "update", together_change),
            (stack.e2e, "action", e2e_change),
        ]
        for sim, route, text in sims:
            sim.faults.add(Fault(route="get", kind=kind, times=-1, **extra))
            sim.faults.add(Fault(route="list", kind=kind, times=-1, **extra))
            seen.add("refusal", (await command(stack, text)).text)
            seen.add("list", (await command(stack, "list")).text)
            await direct_exceptions(stack, seen)
            sim.faults.clear()
            sim.faults.add(Fault(route=route, kind=kind, times=1, **extra))
            seen.add("change", (await command(stack, text)).text)
            sim.faults.clear()
            await settle(stack)

    # A Slack API error on the root post.
    stack.slack.fail("chat.postMessage", "not_in_channel")
    seen.add("slack error", (await command(stack, E2E_ATTACH)).text)
    # Connections refused: a closed port for Together (writes, then everything), and the
    # E2E simulator stopped.
    refusing = await refuse_connections(stack, "together-prod", lambda r: r.method == "PUT")
    seen.add(
        "refused", (await command(stack, "update together-prod tc-h200-ondemand num_gpus=64")).text
    )
    assert refusing.refused
    refusing.refuse = lambda r: True
    await stack.e2e.stop()
    seen.add("refused", (await command(stack, "list")).text)
    seen.add("refused", (await command(stack, "show e2e-delhi 101")).text)
    await direct_exceptions(stack, seen)

    # The audit trail as an admin reads it: every stored error text once more.
    seen.add("audit", (await command(stack, "audit", user="U01ALICE")).text)
    await settle(stack)


async def direct_exceptions(stack: LocalStack, seen: Seen) -> None:
    """Call the adapters directly and keep whatever they raise."""
    registry = stack.runtime.registry
    calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("together get", lambda: registry.get("together-prod").get_cluster("tc-h100-reserved")),
        ("together list", lambda: registry.get("together-prod").list_clusters()),
        ("e2e get", lambda: registry.get("e2e-delhi").get_cluster("101")),
        ("e2e list", lambda: registry.get("e2e-delhi").list_clusters()),
    ]
    for where, call in calls:
        try:
            await call()
        except ProviderError as exc:
            seen.exception(where, exc)
            seen.raised += 1


def scan_store(rows: dict[str, list[dict[str, Any]]], seen: Seen) -> None:
    for table, entries in rows.items():
        assert table != "gpuops_change_requests" or entries, "the scenarios stored no request"
        for row in entries:
            seen.add(f"store {table}", row)


def scan_simulator(sim: SimulatorServer, seen: Seen) -> None:
    for request in sim.requests:
        query = {k: v for k, v in request.query.items() if k != "apikey"}  # E2E: it must be
        headers = {k: v for k, v in request.headers.items() if k != "authorization"}
        seen.add(f"{sim.name} request", [request.path, query, headers, request.body])


async def test_no_secret_reaches_logs_slack_store_exceptions_or_providers(
    make_stack: StackFactory, every_log: Everything
) -> None:
    stack = await make_stack(**LEAK_STACK, **SECRETS)
    debug_everywhere()
    seen = Seen()

    await scenarios(stack, seen)

    slack = stack.slack
    for call in slack.calls:
        seen.add(f"slack {call.method}", call.args)
    for post in slack.response_posts:
        seen.add("response_url", post.model_dump())
    for channel, messages in slack.messages.items():
        for message in messages:
            seen.add(f"message in {channel}", message.model_dump())
    for ephemeral in slack.ephemerals:
        seen.add("ephemeral", ephemeral.model_dump())
    for view in slack.views.values():
        seen.add("view", view.model_dump())

    async with stack.runtime.store.engine.connect() as conn:
        rows = {
            table.name: [dict(r) for r in (await conn.execute(select(table))).mappings().all()]
            for table in metadata.sorted_tables
        }
    scan_store(rows, seen)
    scan_simulator(stack.together, seen)
    scan_simulator(stack.e2e, seen)
    async with httpx.AsyncClient(base_url=stack.base_url) as client:
        for path in ("/metrics", "/healthz"):
            seen.add(path, (await client.get(path)).text)

    # The scan would see a leak: the scenarios did produce the texts it reads.
    assert len(every_log.texts) > 200 and len(seen.items) > 200 and seen.raised >= 16
    joined = "\n".join(every_log.texts)
    assert "; retry 1 in" in joined  # provider retries were logged
    entries = [json.loads(line) for line in every_log.json_lines]  # each line is an object
    assert any(e.get("user") == "U04DAVE" and e.get("project") for e in entries)
    assert any(e["logger"].startswith(("slack_bolt", "slack_sdk")) for e in entries)
    assert any("could not connect" in text for _, text in seen.items)
    assert any("not JSON" in text for _, text in seen.items)
    assert any("no answer within" in text for _, text in seen.items)
    assert stack.e2e.calls("action", "PUT") and stack.together.calls("update", "PUT")

    leaks = [
        (name, "log", text[:300])
        for name, secret in SECRETS.items()
        for text in every_log.texts
        if secret in text
    ] + [
        (name, where, text[:300])
        for name, secret in SECRETS.items()
        for where, text in seen.items
        if secret in text
    ]
    assert leaks == []


async def test_the_scan_finds_a_secret_where_one_is(
    make_stack: StackFactory, every_log: Everything
) -> None:
    """The places scanned do carry the secrets where they must (the simulators' auth parts),
    so a scan that finds nothing elsewhere is not blind."""
    stack = await make_stack(**LEAK_STACK, **SECRETS)
    await command(stack, "show e2e-delhi 101")
    await command(stack, "show together-prod tc-h100-reserved")
    e2e = stack.e2e.calls("get")[0]
    assert e2e.query["apikey"] == SECRETS["e2e_key"]
    assert e2e.headers["authorization"] == f"Bearer {SECRETS['e2e_token']}"
    together = stack.together.calls("get")[0]
    assert together.headers["authorization"] == f"Bearer {SECRETS['together_key']}"
    # A record carrying a secret is masked by the filter the runtime attached.
    logging.getLogger("gpuops.leakscan").warning("calling with %s", SECRETS["e2e_key"])
    assert not any(SECRETS["e2e_key"] in text for text in every_log.texts)
    assert any("calling with ***" in text for text in every_log.texts)
