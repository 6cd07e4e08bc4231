"""E2E failure rules (every reply shape → the right typed error), injected faults with
exact request counts, and secrets kept out of logs and exception texts."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from bot.local.simulators.base import Fault, FaultKind
from bot.local.simulators.e2e import E2ESimulator
from bot.providers.e2e import E2EClient, ScaleClusterAction
from bot.providers.errors import (
    ProviderAuthError,
    ProviderConnectionError,
    ProviderError,
    ProviderMalformedReply,
    ProviderNotFound,
    ProviderRateLimited,
    ProviderRequestError,
    ProviderServerError,
    ProviderTimeout,
)
from bot.redact import install_log_redaction
from tests.support.e2e_kit import (
    CannedServer,
    canned_server,
    doc_examples,
    fast,
    make_adapter,
    make_client,
    running_simulator,
)
from tests.support.reliability import counting_transport

SHAPES = doc_examples()["myaccount_error_shapes_seen_by_e2ectl"]

# shape name → (HTTP status to serve, expected error, text the user must see)
SHAPE_EXPECTATIONS: dict[str, tuple[int, type[ProviderError], str]] = {
    "envelope_failure": (401, ProviderAuthError, "Unauthorized"),
    "drf_detail": (403, ProviderAuthError, "Authentication credentials were not provided."),
    "status_code_message": (400, ProviderRequestError, "Project not found"),
    "errors_true_on_200": (200, ProviderRequestError, "Validation failed"),
    "string_errors_429": (429, ProviderRateLimited, "Node quota reached"),
    "precondition_412": (
        412,
        ProviderRequestError,
        "Action not allowed on Resources that are part of Disaster Recovery Plan",
    ),
}

Call = Callable[[E2EClient], Awaitable[Any]]


async def _read(client: E2EClient) -> Any:
    return await client.get_cluster(101)


async def _list(client: E2EClient) -> Any:
    return await client.list_clusters()


async def _scale(client: E2EClient) -> Any:
    return await client.run_action(101, ScaleClusterAction(additional_nodes=1))


@pytest.fixture
async def server() -> AsyncIterator[CannedServer]:
    async with canned_server() as canned:
        yield canned


@pytest.fixture
async def sim() -> AsyncIterator[E2ESimulator]:
    async with running_simulator() as simulator:
        yield simulator


def test_every_documented_shape_is_covered() -> None:
    assert set(SHAPE_EXPECTATIONS) == {k for k in SHAPES if not k.startswith("_")}


@pytest.mark.parametrize("shape", sorted(SHAPE_EXPECTATIONS))
@pytest.mark.parametrize("call", [_read, _list, _scale], ids=["get", "list", "action"])
async def test_documented_error_shapes(server: CannedServer, shape: str, call: Call) -> None:
    status, expected, text = SHAPE_EXPECTATIONS[shape]
    server.answer(status, SHAPES[shape]["body"])
    client = make_client(server.base_url)
    with pytest.raises(expected) as caught:
        await call(client)
    await client.aclose()
    error = caught.value
    assert type(error) is expected
    assert text in error.provider_message
    assert text in str(error)
    assert error.may_have_applied is False  # refused: nothing was processed


ENVELOPES_ON_200: list[tuple[dict[str, Any], type[ProviderError], str]] = [
    ({"code": 401, "errors": {}, "message": "Token expired"}, ProviderAuthError, "Token expired"),
    ({"code": 403, "message": "Forbidden"}, ProviderAuthError, "Forbidden"),
    ({"code": 404, "message": "No such cluster"}, ProviderNotFound, "No such cluster"),
    ({"status_code": 429, "message": "Slow down"}, ProviderRateLimited, "Slow down"),
    ({"status_code": 400, "message": "Bad project"}, ProviderRequestError, "Bad project"),
    ({"detail": "Not allowed"}, ProviderRequestError, "Not allowed"),
    (
        {"code": 200, "data": {"id": 1}, "errors": "quota reached", "message": ""},
        ProviderRequestError,
        "quota reached",
    ),
    (
        {"code": 200, "data": {"id": 1}, "errors": {"sku": ["sold out"]}, "message": "Failed"},
        ProviderRequestError,
        "Failed (sku: sold out)",
    ),
    ({"code": 200, "data": {"id": 1}, "errors": True}, ProviderRequestError, "failure"),
]


@pytest.mark.parametrize(("body", "expected", "text"), ENVELOPES_ON_200)
async def test_failure_envelopes_on_http_200(
    server: CannedServer, body: dict[str, Any], expected: type[ProviderError], text: str
) -> None:
    server.answer(200, body)
    client = make_client(server.base_url)
    with pytest.raises(expected) as caught:
        await client.get_cluster(1)
    await client.aclose()
    assert type(caught.value) is expected
    assert text in caught.value.provider_message
    assert server.hits == 1  # an HTTP 200 is never retried


async def test_server_error_code_on_200_for_an_action_may_have_applied(
    server: CannedServer,
) -> None:
    server.answer(200, {"status_code": 503, "message": "Backend unavailable"})
    client = make_client(server.base_url)
    with pytest.raises(ProviderServerError) as caught:
        await _scale(client)
    await client.aclose()
    assert caught.value.may_have_applied is True
    assert caught.value.provider_message == "Backend unavailable"


async def test_a_successful_envelope_is_not_a_failure(server: CannedServer) -> None:
    server.answer(200, {"code": 200, "data": {"id": 5, "status": "Running"}, "errors": {}})
    client = make_client(server.base_url)
    cluster = await client.get_cluster(5)
    await client.aclose()
    assert (cluster.id, cluster.status) == (5, "Running")


async def test_errors_on_non_json_replies(server: CannedServer) -> None:
    client = make_client(server.base_url)
    server.answer(502, raw="<html>bad gateway</html>")
    with pytest.raises(ProviderServerError) as on_action:
        await _scale(client)
    assert on_action.value.may_have_applied is True
    assert server.hits == 1

    server.answer(200, raw="<html>maintenance</html>")
    with pytest.raises(ProviderMalformedReply) as on_read:
        await _read(client)
    assert on_read.value.may_have_applied is False
    await client.aclose()


@pytest.mark.parametrize(
    ("body", "call", "may_have_applied"),
    [
        (["not", "an", "object"], _read, False),
        ({"code": 200, "data": "a string", "errors": {}}, _read, False),
        ({"code": 200, "data": {"name": "no id"}, "errors": {}}, _read, False),
        ({"code": 200, "data": {"id": 1}, "errors": {}}, _list, False),
        ({"code": 200, "data": ["x"], "errors": {}}, _scale, True),
    ],
)
async def test_replies_of_the_wrong_shape_are_malformed(
    server: CannedServer, body: Any, call: Call, may_have_applied: bool
) -> None:
    server.answer(200, body)
    client = make_client(server.base_url)
    with pytest.raises(ProviderMalformedReply) as caught:
        await call(client)
    await client.aclose()
    assert caught.value.may_have_applied is may_have_applied


# -- faults injected in the simulator ----------------------------------------------------------


async def test_429_with_retry_after_on_get_is_retried_once(sim: E2ESimulator) -> None:
    sim.faults.add(Fault(route="get", kind=FaultKind.RATE_LIMIT, retry_after=1))
    client = make_client(sim.base_url)
    cluster = await client.get_cluster(101)
    await client.aclose()
    assert cluster.id == 101
    assert len(sim.calls("get")) == 2


async def test_500_on_get_is_retried(sim: E2ESimulator) -> None:
    sim.faults.add(Fault(route="get", kind=FaultKind.SERVER_ERROR, status=500))
    client = make_client(sim.base_url)
    assert (await client.get_cluster(101)).id == 101
    assert len(sim.calls("get")) == 2

    sim.faults.add(Fault(route="list", kind=FaultKind.SERVER_ERROR, status=503, times=-1))
    with pytest.raises(ProviderServerError) as caught:
        await client.list_clusters()
    await client.aclose()
    assert len(sim.calls("list")) == 3  # the whole retry budget, then the error
    assert caught.value.may_have_applied is False


async def test_500_on_scale_cluster_is_sent_once(sim: E2ESimulator) -> None:
    sim.faults.add(Fault(route="action", kind=FaultKind.SERVER_ERROR, status=500))
    client = make_client(sim.base_url)
    with pytest.raises(ProviderServerError) as caught:
        await _scale(client)
    await client.aclose()
    assert len(sim.calls("action")) == 1
    assert caught.value.may_have_applied is True
    assert caught.value.status == 500


async def test_hang_on_scale_cluster_times_out_after_one_request() -> None:
    async with running_simulator() as sim:
        sim.faults.add(Fault(route="action", kind=FaultKind.HANG, seconds=30))
        client = make_client(sim.base_url, settings=fast(total_timeout=0.3))
        sent = counting_transport()
        await client.transport.aclose()  # the next call builds its client on ``sent``
        client.transport.transport = sent
        with pytest.raises(ProviderTimeout) as caught:
            await _scale(client)
        await client.aclose()
        # Counted as gpuops sent it: on a busy machine the 0.3 s can pass before the
        # simulator has read the request, but it is never sent a second time.
        assert [m for m, _ in sent.seen] == ["PUT"]
        assert len(sim.calls("action")) <= 1
        assert caught.value.may_have_applied is True


async def test_429_on_an_action_is_retried_and_applied_once(sim: E2ESimulator) -> None:
    sim.faults.add(Fault(route="action", kind=FaultKind.RATE_LIMIT, retry_after=1))
    client = make_client(sim.base_url)
    reply = await _scale(client)
    await client.aclose()
    assert len(sim.calls("action")) == 2
    assert reply.cluster is not None and reply.cluster.no_of_nodes == 3
    assert sim.clusters[101].nodes == 3


async def test_429_on_an_action_until_the_budget_ends(sim: E2ESimulator) -> None:
    sim.faults.add(Fault(route="action", kind=FaultKind.RATE_LIMIT, times=-1, message="Busy"))
    client = make_client(sim.base_url)
    with pytest.raises(ProviderRateLimited) as caught:
        await _scale(client)
    await client.aclose()
    assert len(sim.calls("action")) == 3
    assert caught.value.may_have_applied is False
    assert caught.value.provider_message == "Busy"
    assert sim.clusters[101].nodes == 2


@pytest.mark.parametrize(
    ("route", "call", "may_have_applied"),
    [("get", _read, False), ("list", _list, False), ("action", _scale, True)],
)
async def test_malformed_json_is_a_malformed_reply(
    sim: E2ESimulator, route: str, call: Call, may_have_applied: bool
) -> None:
    sim.faults.add(Fault(route=route, kind=FaultKind.MALFORMED))
    client = make_client(sim.base_url)
    with pytest.raises(ProviderMalformedReply) as caught:
        await call(client)
    await client.aclose()
    assert len(sim.calls(route)) == 1
    assert caught.value.may_have_applied is may_have_applied


async def test_connection_refused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = make_client(f"http://127.0.0.1:{port}/myaccount/api/v1/gpu")
    with pytest.raises(ProviderConnectionError) as caught:
        await _scale(client)
    await client.aclose()
    assert caught.value.may_have_applied is False


async def test_apply_then_fail_on_scale_cluster(sim: E2ESimulator) -> None:
    sim.faults.add(Fault(route="action", kind=FaultKind.APPLY_THEN_FAIL, status=500))
    adapter = make_adapter(sim.base_url)
    state = await adapter.get_cluster("101")
    plan = adapter.plan(state, "scale_cluster", {"additional_nodes": "1"})
    with pytest.raises(ProviderServerError) as caught:
        await adapter.apply(plan)
    await adapter.aclose()
    assert len(sim.calls("action")) == 1
    assert sim.clusters[101].nodes == 3
    assert caught.value.may_have_applied is True


async def test_errors_true_fault_is_a_refusal(sim: E2ESimulator) -> None:
    sim.faults.add(Fault(route="action", kind=FaultKind.ERRORS_TRUE, message="Validation failed"))
    client = make_client(sim.base_url)
    with pytest.raises(ProviderRequestError) as caught:
        await _scale(client)
    await client.aclose()
    assert caught.value.provider_message == "Validation failed"
    assert caught.value.may_have_applied is False
    assert sim.clusters[101].nodes == 2


async def test_simulator_refusals_reach_the_user(sim: E2ESimulator) -> None:
    client = make_client(sim.base_url, project_id=99999)
    with pytest.raises(ProviderRequestError) as wrong_project:
        await _read(client)
    await client.aclose()
    assert wrong_project.value.provider_message == "Project not found"

    client = make_client(sim.base_url, api_key="not-the-key")
    with pytest.raises(ProviderAuthError) as wrong_key:
        await _list(client)
    await client.aclose()
    assert wrong_key.value.provider_message == "Unauthorized (auth: invalid)"

    client = make_client(sim.base_url, auth_token="not-the-token")
    with pytest.raises(ProviderAuthError) as wrong_token:
        await _read(client)
    await client.aclose()
    assert wrong_token.value.status == 403


# -- secrets ---------------------------------------------------------------------------------

LEAK_API_KEY = "leakcheck-apikey-4f9e2a71c0"
LEAK_TOKEN = "leakcheck-token-8c3d5b60e4"


def _exception_texts(exc: BaseException) -> list[str]:
    texts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        texts += [str(current), repr(current), *map(str, current.args)]
        current = current.__cause__ or current.__context__
    return texts


async def test_secrets_never_reach_logs_or_exceptions(caplog: pytest.LogCaptureFixture) -> None:
    install_log_redaction()
    caplog.set_level(logging.DEBUG)
    for name in ("httpx", "httpcore", "aiohttp"):
        caplog.set_level(logging.DEBUG, logger=name)
    faults = [
        ("get", FaultKind.RATE_LIMIT, _read),
        ("get", FaultKind.SERVER_ERROR, _read),
        ("list", FaultKind.MALFORMED, _list),
        ("action", FaultKind.SERVER_ERROR, _scale),
        ("action", FaultKind.HANG, _scale),
        ("action", FaultKind.APPLY_THEN_FAIL, _scale),
        ("action", FaultKind.ERRORS_TRUE, _scale),
        ("get", FaultKind.RATE_LIMIT, _read),
    ]
    texts: list[str] = []
    async with running_simulator(api_key=LEAK_API_KEY, auth_token=LEAK_TOKEN) as sim:
        client = make_client(
            sim.base_url,
            api_key=LEAK_API_KEY,
            auth_token=LEAK_TOKEN,
            settings=fast(total_timeout=0.3),
        )
        for route, kind, call in faults:
            sim.faults.add(Fault(route=route, kind=kind, times=-1, seconds=0.6))
            with pytest.raises(ProviderError) as failed:
                await call(client)
            texts += _exception_texts(failed.value)
            sim.faults.clear()
        await client.aclose()
        for api_key, auth_token in (("wrong-apikey-000", LEAK_TOKEN), (LEAK_API_KEY, "wrong-0")):
            bad = make_client(sim.base_url, api_key=api_key, auth_token=auth_token)
            with pytest.raises(ProviderAuthError) as refused:
                await _read(bad)
            texts += _exception_texts(refused.value)
            await bad.aclose()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    unreachable = make_client(
        f"http://127.0.0.1:{port}/myaccount/api/v1/gpu", api_key=LEAK_API_KEY, auth_token=LEAK_TOKEN
    )
    with pytest.raises(ProviderConnectionError) as refused_connection:
        await _read(unreachable)
    texts += _exception_texts(refused_connection.value)
    await unreachable.aclose()

    assert len(texts) >= 10 * 3
    assert any(r.name.startswith("bot.providers") for r in caplog.records)  # logging was live
    texts += [record.getMessage() for record in caplog.records]
    texts.append(caplog.text)
    for text in texts:
        assert LEAK_API_KEY not in text
        assert LEAK_TOKEN not in text
