"""The provider fault matrix, end to end over real HTTP: every provider call a change makes
(Together: the fetch for the preview, the fetch at approval, the update; E2E: the same
fetches, ``scale_cluster`` and ``attach_ip``, and the fetch after ``attach_ip``), for every
simulator fault, on both providers.

Each cell asserts what SPEC §1.3 / §6 promise: the user is told clearly (in the thread, or
ephemerally when no request exists yet), the request ends ``failed`` when the change
provably did not happen and ``unknown`` when it may have — never a silent success — the
provider saw exactly as many calls as the retry rules allow (GET retried; Together PUT only
on connect errors / 429 / 502 / 503 / 504; E2E actions only on connect errors and 429), and
the audit trail records the outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import httpx
import pytest
import pytest_asyncio

from bot.core.store import RequestState
from bot.local.demo.stack import LocalStack, StackOptions
from bot.local.simulators.base import Fault, FaultKind, SimulatorServer
from tests.support.reliability import (
    APPROVER,
    ATTEMPTS,
    E2E_ATTACH,
    E2E_SCALE,
    FAST,
    OPERATOR,
    TOGETHER_SCALE_DOWN,
    TOGETHER_SCALE_UP,
    RefusingTransport,
    click,
    command,
    newest_request,
    refuse_connections,
    settle,
    thread_texts,
    wait_state,
    wait_terminal,
)

S = RequestState
StackFactory = Callable[..., Awaitable[LocalStack]]
Mode = Literal["read", "together_put", "e2e_action"]


@dataclass(frozen=True)
class FaultCase:
    name: str
    kind: FaultKind | None  # None: connection refused
    text: str  # what the person must be able to read
    status: int = 500
    seconds: float = 0.0
    retry_after: int = 0
    e2e_only: bool = False

    def fault(self, route: str) -> Fault:
        assert self.kind is not None
        return Fault(
            route=route,
            kind=self.kind,
            status=self.status,
            seconds=self.seconds,
            retry_after=self.retry_after,
            times=-1,  # every request until the end of the test
        )


FAULTS = [
    FaultCase("latency", FaultKind.LATENCY, "no answer within 0.5 s", seconds=0.8),
    FaultCase("rate_limit", FaultKind.RATE_LIMIT, "(HTTP 429)", retry_after=1),
    FaultCase("http_500", FaultKind.SERVER_ERROR, "(HTTP 500)", status=500),
    FaultCase("http_502", FaultKind.SERVER_ERROR, "(HTTP 502)", status=502),
    FaultCase("http_503", FaultKind.SERVER_ERROR, "(HTTP 503)", status=503),
    FaultCase("malformed", FaultKind.MALFORMED, "not JSON"),
    FaultCase("refused", None, "could not connect"),
    FaultCase("hang", FaultKind.HANG, "no answer within 0.5 s", seconds=1.0),
    FaultCase("apply_then_fail", FaultKind.APPLY_THEN_FAIL, "(HTTP 500)", status=500),
    # Applied, then the connection closed with no answer: aiohttp alone would send a PUT
    # again (bot.providers.wire stops it), which runs an E2E action twice.
    FaultCase("apply_then_drop", FaultKind.APPLY_THEN_DROP, "connection failed during"),
    FaultCase("errors_true", FaultKind.ERRORS_TRUE, "injected fault", e2e_only=True),
]

# Which faults each retry rule repeats (SPEC §1.3); everything else is sent once.
RETRIED: dict[Mode, set[str]] = {
    "read": {
        "latency",
        "rate_limit",
        "http_500",
        "http_502",
        "http_503",
        "refused",
        "hang",
        "apply_then_fail",
        "apply_then_drop",
    },
    "together_put": {"rate_limit", "http_502", "http_503", "refused"},
    "e2e_action": {"rate_limit", "refused"},
}
# A write that failed this way provably did not happen; any other failure may have.
NOT_APPLIED = {"rate_limit", "refused", "errors_true"}


def expected_attempts(mode: Mode, fault: FaultCase) -> int:
    return ATTEMPTS if fault.name in RETRIED[mode] else 1


@dataclass(frozen=True)
class Position:
    """One provider call of a change, and how the change is driven to it."""

    name: str
    provider: Literal["together", "e2e"]
    project: str
    command: str
    route: str  # the simulator's fault route
    mode: Mode
    where: Literal["preview", "approval", "write", "after_write"]


POSITIONS = [
    Position(
        "together-get-preview", "together", "together-prod", TOGETHER_SCALE_UP, "get", "read",
        "preview",
    ),
    Position(
        "together-get-approval", "together", "together-prod", TOGETHER_SCALE_DOWN, "get", "read",
        "approval",
    ),
    Position(
        "together-update", "together", "together-prod", TOGETHER_SCALE_UP, "update",
        "together_put", "write",
    ),
    Position("e2e-get-preview", "e2e", "e2e-delhi", E2E_SCALE, "get", "read", "preview"),
    Position("e2e-get-approval", "e2e", "e2e-delhi", E2E_SCALE, "get", "read", "approval"),
    Position("e2e-scale", "e2e", "e2e-delhi", E2E_SCALE, "action", "e2e_action", "write"),
    Position("e2e-attach", "e2e", "e2e-delhi", E2E_ATTACH, "action", "e2e_action", "write"),
    Position(
        "e2e-get-after-attach", "e2e", "e2e-delhi", E2E_ATTACH, "get", "read", "after_write"
    ),
]  # fmt: skip

CELLS = [
    pytest.param(position, fault, id=f"{position.name}-{fault.name}")
    for position in POSITIONS
    for fault in FAULTS
    if not (fault.e2e_only and position.provider != "e2e")
]


def simulator(stack: LocalStack, position: Position) -> SimulatorServer:
    return stack.together if position.provider == "together" else stack.e2e


def _is_put(request: httpx.Request) -> bool:
    return request.method == "PUT"


def _is_get(request: httpx.Request) -> bool:
    return request.method == "GET"


def _refuse_none(request: httpx.Request) -> bool:
    return False


async def arm(stack: LocalStack, position: Position, fault: FaultCase) -> RefusingTransport:
    """Make the position's call fail with ``fault`` from now on; the transport returned
    counts every attempt gpuops makes from now on (refusing them for ``refused``)."""
    if fault.kind is None:
        if position.where == "after_write":
            refusing: RefusingTransport | None = None

            def after_put(request: httpx.Request) -> bool:
                assert refusing is not None
                return _is_get(request) and any(m == "PUT" for m, _ in refusing.seen)

            refusing = await refuse_connections(stack, position.project, after_put)
            return refusing
        return await refuse_connections(
            stack, position.project, _is_put if position.route != "get" else _is_get
        )
    sim = simulator(stack, position)
    if position.where == "after_write":
        # The fetch for the preview passes; the fetch after the action meets the fault.
        sim.faults.add(Fault(route="get", kind=FaultKind.LATENCY, seconds=0, times=1))
    sim.faults.add(fault.fault(position.route))
    return await refuse_connections(stack, position.project, _refuse_none)


def calls_at_position(
    stack: LocalStack, position: Position, refusing: RefusingTransport | None, fault: FaultCase
) -> int:
    """How many times gpuops tried the call at this position (counted as it sends them: on
    a busy machine an attempt may time out before the simulator has read it). A write the
    simulator received more often than gpuops sent it would be a bug of its own."""
    assert refusing is not None
    if fault.kind is None:
        return len(refusing.refused)
    method = "GET" if position.route == "get" else "PUT"
    tried = sum(1 for m, _ in refusing.seen if m == method)
    if method == "PUT":
        assert len(simulator(stack, position).calls(position.route, method)) <= tried
    # The fetch for the preview went through the same transport before the action's.
    return tried - (1 if position.where == "after_write" else 0)


TOGETHER_CLUSTERS = ("tc-h200-ondemand", "tc-h100-reserved")


def unchanged(stack: LocalStack, position: Position) -> bool:
    """The cluster at the simulator is as seeded: the change did not happen."""
    if position.provider == "together":
        gpus = {c: stack.together.clusters[c]["num_gpus"] for c in TOGETHER_CLUSTERS}
        return gpus == {"tc-h200-ondemand": 8, "tc-h100-reserved": 16}
    cluster = stack.e2e.clusters[101]
    return cluster.nodes == 2 and cluster.reserved_ip_ids == []


# The timeout cells run one after the other on a 0.5 s client timeout. The others need no
# short timeout (2 s leaves room for a loaded machine) and run at once, a few at a time,
# each on its own fresh stack, before the first of them is reported; each test then
# reports its own cell.
TIMEOUT_FAULTS = {"latency", "hang"}
CONCURRENT_CELLS = 4
# The concurrent cells' faults answer at once: the timeout is only a safety, long enough
# that four stacks at a time on a busy two-core machine never meet it.
ROOMY = {**FAST, "total_timeout": 10.0}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def matrix(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, BaseException | None]:
    cells = {f"{p.name}-{f.name}": (p, f) for p in POSITIONS for f in FAULTS}
    wanted = {
        item.callspec.id
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.originalname == "test_fault_matrix"
    }
    gate = asyncio.Semaphore(CONCURRENT_CELLS)
    outcomes: dict[str, BaseException | None] = {}

    async def one(cell: str) -> None:
        position, fault = cells[cell]
        async with gate:
            options = StackOptions(
                poll_seconds=0, transition_seconds=0.3, sweep_seconds=3600, **ROOMY
            )
            stack = await LocalStack.start(options, tmp_path_factory.mktemp("cell"))
            try:
                await run_cell(stack, position, fault)
                outcomes[cell] = None
            except Exception as exc:
                outcomes[cell] = exc
            finally:
                await stack.stop()

    concurrent = sorted(c for c in wanted if cells[c][1].name not in TIMEOUT_FAULTS)
    await asyncio.gather(*(one(cell) for cell in concurrent))
    return outcomes


@pytest.mark.parametrize(("position", "fault"), CELLS)
async def test_fault_matrix(
    make_stack: StackFactory,
    matrix: dict[str, BaseException | None],
    position: Position,
    fault: FaultCase,
) -> None:
    if fault.name in TIMEOUT_FAULTS:
        await run_cell(await make_stack(**FAST), position, fault)
        return
    failure = matrix[f"{position.name}-{fault.name}"]
    if failure is not None:
        raise failure


async def run_cell(stack: LocalStack, position: Position, fault: FaultCase) -> None:
    sim = simulator(stack, position)
    refusing: RefusingTransport | None = None
    if position.where in ("preview", "write", "after_write"):
        refusing = await arm(stack, position, fault)
    reply = await command(stack, position.command)
    record = await newest_request(stack)

    if position.where == "preview":
        # No request exists yet: the person is told ephemerally, and it is audited.
        assert record is None
        assert reply.response_type == "ephemeral"
        assert "could not fetch" in reply.text and fault.text in reply.text, reply.text
        await settle(stack)
        assert calls_at_position(stack, position, refusing, fault) == expected_attempts(
            "read", fault
        )
        assert not sim.calls(None, "PUT")
        refusals = [
            e
            for e in await stack.runtime.store.list_audit(project=position.project)
            if e.event == "refused"
        ]
        assert len(refusals) == 1 and refusals[0].actor == OPERATOR
        assert str(refusals[0].outcome).startswith("provider_")
        assert fault.text in refusals[0].detail["reason"]
        return

    assert record is not None
    if record.needs_approval:
        assert record.state is S.PENDING and "waiting for approval" in reply.text
        if position.where == "approval":
            refusing = await arm(stack, position, fault)
        await click(stack, record.id)
    record = await wait_terminal(stack, record.id)
    await settle(stack)
    texts = "\n".join(thread_texts(stack, record))
    audit = await stack.runtime.store.list_audit(request_id=record.id, limit=100)
    puts = len(sim.calls(None, "PUT"))

    if position.where == "approval":
        # The re-check before running failed: nothing was sent; the approver and the
        # thread are told why.
        assert record.state is S.FAILED
        assert puts == 0 and unchanged(stack, position)
        assert fault.text in texts and "could not be re-checked" in texts, texts
        assert "stale" not in texts  # a provider outage is not a changed cluster
        whispered = [e.text for e in stack.slack.ephemerals_for(APPROVER)]
        assert any(record.id in t and fault.text in t for t in whispered), whispered
        assert calls_at_position(stack, position, refusing, fault) == expected_attempts(
            "read", fault
        )
        refused = [e for e in audit if e.event == "refused"]
        assert len(refused) == 1 and str(refused[0].outcome).startswith("provider_")
        assert fault.text in refused[0].detail["reason"]
        return

    if position.where == "after_write":
        # The action went through once; only the read afterwards failed. It is a success,
        # and the thread says the cluster could not be read afterwards.
        assert record.state is S.SUCCEEDED
        assert puts == 1 and stack.e2e.clusters[101].reserved_ip_ids == [501]
        assert "Reserved IP attached" in texts and fault.text in texts, texts
        assert calls_at_position(stack, position, refusing, fault) == expected_attempts(
            "read", fault
        )
        results = [e for e in audit if e.event == "result"]
        assert [e.outcome for e in results] == ["succeeded"]
        return

    # The write itself failed.
    assert calls_at_position(stack, position, refusing, fault) == expected_attempts(
        position.mode, fault
    )
    if fault.kind is None:
        assert puts == 0  # refused connections never reached the simulator
    if fault.name in NOT_APPLIED:
        assert record.state is S.FAILED, record
        assert "Nothing was changed" in texts
        assert unchanged(stack, position)
    else:
        assert record.state is S.UNKNOWN, record
        assert "may have applied" in texts and "will not be re-run" in texts
    assert fault.text in texts, texts
    assert fault.text in (record.result_message or "")
    results = [e for e in audit if e.event == "result"]
    assert len(results) == 1 and results[0].outcome == str(record.state)
    assert fault.text in results[0].detail["message"]
    root = stack.slack.message(record.channel, record.root_ts or "")
    shown = "[failed]" if record.state is S.FAILED else "[outcome unknown]"
    assert root is not None and shown in root.text, root


# -- transient faults: retried where that is safe, and then the change succeeds once -------


@pytest.mark.parametrize(
    ("text", "project", "route", "kind", "status", "puts", "state"),
    [
        pytest.param(TOGETHER_SCALE_UP, "together-prod", "update", FaultKind.RATE_LIMIT, 429, 2,
                     S.SUCCEEDED, id="together-put-429-once"),
        pytest.param(TOGETHER_SCALE_UP, "together-prod", "update", FaultKind.SERVER_ERROR, 503, 2,
                     S.SUCCEEDED, id="together-put-503-once"),
        pytest.param(TOGETHER_SCALE_UP, "together-prod", "update", FaultKind.SERVER_ERROR, 500, 1,
                     S.UNKNOWN, id="together-put-500-once-not-retried"),
        pytest.param(E2E_ATTACH, "e2e-delhi", "action", FaultKind.RATE_LIMIT, 429, 2,
                     S.SUCCEEDED, id="e2e-action-429-once"),
        pytest.param(E2E_ATTACH, "e2e-delhi", "action", FaultKind.SERVER_ERROR, 503, 1,
                     S.UNKNOWN, id="e2e-action-503-once-not-retried"),
    ],
)  # fmt: skip
async def test_a_transient_fault_is_retried_only_where_safe(
    make_stack: StackFactory,
    text: str,
    project: str,
    route: str,
    kind: FaultKind,
    status: int,
    puts: int,
    state: RequestState,
) -> None:
    stack = await make_stack(**FAST)
    sim: SimulatorServer = stack.together if project == "together-prod" else stack.e2e
    sim.faults.add(Fault(route=route, kind=kind, status=status, retry_after=1, times=1))
    await command(stack, text)
    record = await newest_request(stack)
    assert record is not None
    record = await wait_terminal(stack, record.id)
    await settle(stack)
    assert record.state is state
    assert len(sim.calls(route, "PUT")) == puts


async def test_a_connection_refused_once_is_retried_and_the_action_runs_once(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(**FAST)
    refusals = 0

    def first_put(request: httpx.Request) -> bool:
        nonlocal refusals
        if request.method == "PUT" and refusals == 0:
            refusals += 1
            return True
        return False

    refusing = await refuse_connections(stack, "e2e-delhi", first_put)
    await command(stack, E2E_ATTACH)
    record = await newest_request(stack)
    assert record is not None
    record = await wait_terminal(stack, record.id)
    await settle(stack)
    assert record.state is S.SUCCEEDED
    assert len(refusing.refused) == 1 and len(stack.e2e.calls("action", "PUT")) == 1
    assert stack.e2e.clusters[101].reserved_ip_ids == [501]


async def test_retry_after_is_honoured_but_capped(make_stack: StackFactory) -> None:
    # Retry-After: 30 would stall the change for a minute; the cap (50 ms here) bounds it.
    stack = await make_stack(**FAST)
    stack.together.faults.add(
        Fault(route="update", kind=FaultKind.RATE_LIMIT, retry_after=30, times=2)
    )
    await command(stack, TOGETHER_SCALE_UP)
    record = await newest_request(stack)
    assert record is not None
    record = await wait_terminal(stack, record.id)
    assert record.state is S.SUCCEEDED
    puts = stack.together.calls("update", "PUT")
    assert len(puts) == 3
    assert (record.updated_at - record.created_at).total_seconds() < 5


# -- the same on both state stores, and with the simulator really stopped -----------------


@pytest.fixture
async def fast_stack(make_stack: StackFactory, database_url: str) -> LocalStack:
    return await make_stack(database_url=database_url, **FAST)


BOTH_BACKENDS = {
    "together-update-http_500": (POSITIONS[2], FAULTS[2]),
    "together-update-refused": (POSITIONS[2], FAULTS[6]),
    "e2e-scale-hang": (POSITIONS[5], FAULTS[7]),
    "e2e-attach-rate_limit": (POSITIONS[6], FAULTS[1]),
    "e2e-get-approval-http_503": (POSITIONS[4], FAULTS[4]),
}


@pytest.mark.parametrize("cell", sorted(BOTH_BACKENDS))
async def test_fault_cells_on_both_stores(fast_stack: LocalStack, cell: str) -> None:
    position, fault = BOTH_BACKENDS[cell]
    assert cell == f"{position.name}-{fault.name}"
    await run_cell(fast_stack, position, fault)


async def test_a_stopped_simulator_fails_the_preview_ephemerally(fast_stack: LocalStack) -> None:
    await fast_stack.e2e.stop()
    reply = await command(fast_stack, E2E_ATTACH)
    assert reply.response_type == "ephemeral"
    assert "could not fetch 101" in reply.text and "could not connect" in reply.text
    assert await newest_request(fast_stack) is None
    refusals = await fast_stack.runtime.store.list_audit(project="e2e-delhi")
    assert [(e.event, e.outcome) for e in refusals] == [("refused", "provider_connection")]


async def test_a_simulator_stopped_before_approval_fails_the_request_unsent(
    fast_stack: LocalStack,
) -> None:
    await command(fast_stack, E2E_SCALE)
    record = await newest_request(fast_stack)
    assert record is not None
    await wait_state(fast_stack, record.id, {S.PENDING})
    await fast_stack.e2e.stop()
    await click(fast_stack, record.id)
    record = await wait_terminal(fast_stack, record.id)
    await settle(fast_stack)
    assert record.state is S.FAILED
    assert not fast_stack.e2e.calls("action")
    assert "could not connect" in "\n".join(thread_texts(fast_stack, record))
