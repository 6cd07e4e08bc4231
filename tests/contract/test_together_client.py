"""TogetherClient and TogetherAdapter over real HTTP against the simulator: calls, parsing
tolerance, error mapping, retries by fault (with the exact number of requests the simulator
saw), and no API key in any log line or exception text."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import traceback
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest

from bot.local.simulators.base import Fault, FaultKind
from bot.local.simulators.together import TogetherSimulator
from bot.metrics import REGISTRY
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
    RuleViolation,
)
from bot.providers.http import ClientSettings
from bot.providers.together import (
    ClusterType,
    ClusterUpdate,
    GPUWorkerNode,
    PhaseTransition,
    TogetherAdapter,
    TogetherClient,
    error_message,
)
from tests.support.reliability import counting_transport
from tests.support.together_kit import FAST, client_for, running_simulator


@pytest.fixture
async def sim() -> AsyncIterator[TogetherSimulator]:
    async with running_simulator() as simulator:
        yield simulator


@pytest.fixture
async def client(sim: TogetherSimulator) -> AsyncIterator[TogetherClient]:
    together = client_for(sim.base_url)
    yield together
    await together.aclose()


# -- calls ---------------------------------------------------------------------------------
async def test_list_returns_every_cluster_without_a_project(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    clusters = await client.list_clusters()
    assert {c.cluster_id for c in clusters} == set(sim.clusters)
    assert sim.requests[0].query == {}


async def test_list_filters_by_project_id(sim: TogetherSimulator) -> None:
    client = client_for(sim.base_url, project_id="proj-123")
    try:
        clusters = await client.list_clusters()
    finally:
        await client.aclose()
    ids = {c.cluster_id for c in clusters}
    assert "tc-other-proj" not in ids
    assert ids == {
        "tc-h100-reserved",
        "tc-h200-ondemand",
        "tc-b200-pool",
        "tc-h100-sched",
        "tc-booting",
    }
    assert [(r.method, r.path, r.query) for r in sim.requests] == [
        ("GET", "/v1/compute/clusters", {"projectId": "proj-123"})
    ]


async def test_get_parses_nested_objects(client: TogetherClient) -> None:
    cluster = await client.get_cluster("tc-h100-reserved")
    assert cluster.billing_type == "RESERVED"
    assert cluster.num_gpus == 16 and cluster.num_reserved_gpus == 16
    assert len(cluster.gpu_worker_nodes) == 2
    assert isinstance(cluster.gpu_worker_nodes[0], GPUWorkerNode)
    assert isinstance(cluster.phase_transitions[0], PhaseTransition)
    assert cluster.phase_transitions[-1].phase == "CLUSTER_PHASE_READY"
    assert cluster.reservation_end_time is not None
    assert cluster.reservation_end_time > datetime.now(UTC)
    assert cluster.oidc_config is not None and cluster.oidc_config.group_claim == "groups"
    assert cluster.cluster_config is not None and cluster.cluster_config.load_balancer == "NONE"
    assert cluster.steady


async def test_update_sends_only_the_set_fields(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    end = datetime.now(UTC) + timedelta(days=40)
    local_end = end.astimezone(timezone(timedelta(hours=2))).replace(microsecond=0)
    cluster = await client.update_cluster(
        "tc-h100-reserved", ClusterUpdate(num_gpus=24, reservation_end_time=local_end)
    )
    [put] = sim.calls("update")
    expected_end = local_end.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert put.body == {"num_gpus": 24, "reservation_end_time": expected_end}
    assert put.headers["content-type"] == "application/json"
    assert cluster.num_gpus == 24
    assert len(cluster.gpu_worker_nodes) == 3
    assert cluster.status == "WaitingForDataPlaneNodes"


async def test_update_moves_through_statuses_and_converges(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    cluster = await client.update_cluster("tc-h200-ondemand", ClusterUpdate(num_preemptible_gpus=8))
    assert cluster.desired_preemptible_gpus == 8
    assert cluster.allocated_preemptible_gpus == 0
    assert not cluster.steady
    seen = [cluster.status]
    settled = cluster
    async with asyncio.timeout(30):
        while not settled.steady:  # read until it settles, whatever the machine's pace
            await asyncio.sleep(sim.transition_seconds / 10)
            settled = await client.get_cluster("tc-h200-ondemand")
            if settled.status != seen[-1]:
                seen.append(settled.status)
    order = ["WaitingForDataPlaneNodes", "InstallingDrivers", "Ready"]
    assert seen[-1] == "Ready" and seen == [s for s in order if s in seen], seen
    assert settled.allocated_preemptible_gpus == 8
    phases = [p.phase for p in settled.phase_transitions[-3:]]
    assert phases == [
        "CLUSTER_PHASE_WAITING_FOR_DATA_PLANE_NODES",
        "CLUSTER_PHASE_INSTALLING_DRIVERS",
        "CLUSTER_PHASE_READY",
    ]


async def test_scale_down_retires_worker_nodes(client: TogetherClient) -> None:
    cluster = await client.update_cluster("tc-b200-pool", ClusterUpdate(num_gpus=16))
    assert len(cluster.gpu_worker_nodes) == 2
    assert len(cluster.deleted_gpu_worker_nodes) == 2
    assert {e.reason for e in cluster.node_lifecycle_events} == {"TogetherScaledDown"}


async def test_unknown_values_and_extra_fields_are_tolerated(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    raw = sim.clusters["tc-h200-ondemand"]
    raw.update(
        status="Hibernating",
        gpu_type="X900_SXM",
        billing_type="SPOT_AUCTION",
        cluster_type="NOMAD",
        brand_new_field={"nested": [1, 2]},
        capacity_pool_id="",
    )
    raw["phase_transitions"].append(
        {"phase": "CLUSTER_PHASE_HIBERNATING", "transition_time": "2026-01-01T00:00:00Z"}
    )
    raw["gpu_worker_nodes"][0]["phase_transitions"][0]["phase"] = "NODE_PHASE_DREAMING"
    raw["gpu_worker_nodes"][0]["gpu_health"] = "nominal"
    raw["volumes"] = None
    cluster = await client.get_cluster("tc-h200-ondemand")
    assert cluster.status == "Hibernating" and not cluster.steady
    assert (cluster.gpu_type, cluster.billing_type, cluster.cluster_type) == (
        "X900_SXM",
        "SPOT_AUCTION",
        "NOMAD",
    )
    assert cluster.model_extra == {"brand_new_field": {"nested": [1, 2]}}
    assert cluster.capacity_pool_id == ""
    assert cluster.phase_transitions[-1].phase == "CLUSTER_PHASE_HIBERNATING"
    node = cluster.gpu_worker_nodes[0]
    assert node.phase_transitions[0].phase == "NODE_PHASE_DREAMING"
    assert node.model_extra is not None and node.model_extra["gpu_health"] == "nominal"
    assert cluster.volumes == []
    listed = await client.list_clusters()
    assert "Hibernating" in {c.status for c in listed}


async def test_unknown_cluster_is_not_found(sim: TogetherSimulator, client: TogetherClient) -> None:
    with pytest.raises(ProviderNotFound) as caught:
        await client.get_cluster("tc-nope")
    assert caught.value.status == 404
    assert caught.value.provider_message == "cluster tc-nope not found"
    assert len(sim.requests) == 1


async def test_empty_cluster_id_is_refused_without_a_call(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    with pytest.raises(ProviderRequestError, match="no cluster id given"):
        await client.get_cluster("")
    assert sim.requests == []


async def test_failures_are_counted_by_kind(client: TogetherClient) -> None:
    labels = {"provider": "together", "operation": "get_cluster", "kind": "not_found"}
    before = REGISTRY.get_sample_value("gpuops_provider_errors_total", labels) or 0.0
    with pytest.raises(ProviderNotFound):
        await client.get_cluster("tc-nope")
    assert REGISTRY.get_sample_value("gpuops_provider_errors_total", labels) == before + 1


async def test_cluster_id_is_quoted_into_one_path_segment(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    with pytest.raises(ProviderNotFound) as caught:
        await client.get_cluster("a/b c")
    assert caught.value.provider_message == "cluster a/b c not found"
    with pytest.raises(ProviderNotFound):
        await client.get_cluster("..")
    assert [r.route for r in sim.requests] == ["get", "get"]


async def test_bad_key_is_an_auth_error(sim: TogetherSimulator) -> None:
    client = client_for(sim.base_url, "not-the-key")
    try:
        with pytest.raises(ProviderAuthError) as caught:
            await client.list_clusters()
    finally:
        await client.aclose()
    assert caught.value.status == 401
    assert caught.value.provider_message == "Invalid API key provided"
    assert len(sim.requests) == 1


async def test_simulator_validation_reaches_the_user(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    with pytest.raises(ProviderRequestError) as caught:
        await client.update_cluster("tc-h200-ondemand", ClusterUpdate(num_preemptible_gpus=12))
    assert caught.value.status == 400
    assert caught.value.provider_message == "num_preemptible_gpus must be a multiple of 8"
    assert not caught.value.may_have_applied
    assert len(sim.requests) == 1
    assert sim.clusters["tc-h200-ondemand"]["desired_preemptible_gpus"] == 0


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"error": {"message": "quota exceeded", "type": "x"}}, "quota exceeded"),
        ({"error": "plain error text"}, "plain error text"),
        ({"message": "top-level message"}, "top-level message"),
        ({"detail": "detail text"}, "detail text"),
        ({"detail": [{"loc": ["body"], "msg": "bad"}]}, '[{"loc": ["body"], "msg": "bad"}]'),
        ({"unrelated": 1}, "Conflict"),
    ],
)
def test_error_message_shapes(body: object, expected: str) -> None:
    assert error_message(httpx.Response(409, json=body)) == expected


def test_error_message_falls_back_to_the_reason_phrase() -> None:
    assert error_message(httpx.Response(502, text="<html>bad gateway</html>")) == "Bad Gateway"


# -- faults --------------------------------------------------------------------------------
async def test_rate_limit_then_success_on_get(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    sim.faults.add(Fault(route="get", kind=FaultKind.RATE_LIMIT, retry_after=1))
    cluster = await client.get_cluster("tc-h100-reserved")
    assert cluster.cluster_id == "tc-h100-reserved"
    assert len(sim.calls("get")) == 2


async def test_rate_limit_that_persists_is_typed_with_retry_after(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    sim.faults.add(Fault(route="list", kind=FaultKind.RATE_LIMIT, retry_after=7, times=-1))
    with pytest.raises(ProviderRateLimited) as caught:
        await client.list_clusters()
    assert caught.value.retry_after == 7.0
    assert len(sim.requests) == FAST.attempts


async def test_server_error_on_get_is_retried(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    sim.faults.add(Fault(route="get", kind=FaultKind.SERVER_ERROR, status=500))
    assert (await client.get_cluster("tc-booting")).status == "WaitingForDataPlaneNodes"
    assert len(sim.calls("get")) == 2


async def test_server_error_on_get_until_attempts_run_out(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    sim.faults.add(Fault(route="get", kind=FaultKind.SERVER_ERROR, status=500, times=-1))
    with pytest.raises(ProviderServerError) as caught:
        await client.get_cluster("tc-booting")
    assert caught.value.status == 500 and not caught.value.may_have_applied
    assert len(sim.calls("get")) == FAST.attempts


async def test_500_on_put_is_not_retried(sim: TogetherSimulator, client: TogetherClient) -> None:
    sim.faults.add(Fault(route="update", kind=FaultKind.SERVER_ERROR, status=500))
    with pytest.raises(ProviderServerError) as caught:
        await client.update_cluster("tc-h100-reserved", ClusterUpdate(num_gpus=24))
    assert caught.value.may_have_applied
    assert caught.value.provider_message == "injected fault"
    assert len(sim.calls("update")) == 1
    assert sim.clusters["tc-h100-reserved"]["num_gpus"] == 16


async def test_502_and_503_on_put_are_retried_to_success(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    sim.faults.add(Fault(route="update", kind=FaultKind.SERVER_ERROR, status=502))
    sim.faults.add(Fault(route="update", kind=FaultKind.SERVER_ERROR, status=503))
    cluster = await client.update_cluster("tc-h100-reserved", ClusterUpdate(num_gpus=24))
    assert cluster.num_gpus == 24
    assert len(sim.calls("update")) == 3


async def test_503_on_put_until_attempts_run_out(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    sim.faults.add(Fault(route="update", kind=FaultKind.SERVER_ERROR, status=503, times=-1))
    with pytest.raises(ProviderServerError) as caught:
        await client.update_cluster("tc-h100-reserved", ClusterUpdate(num_gpus=24))
    assert caught.value.status == 503 and caught.value.may_have_applied
    assert len(sim.calls("update")) == FAST.attempts


async def test_malformed_json_on_get(sim: TogetherSimulator, client: TogetherClient) -> None:
    sim.faults.add(Fault(route="get", kind=FaultKind.MALFORMED))
    with pytest.raises(ProviderMalformedReply) as caught:
        await client.get_cluster("tc-h100-reserved")
    assert caught.value.provider_message == "the reply was not JSON"
    assert not caught.value.may_have_applied
    assert len(sim.requests) == 1


async def test_malformed_json_on_put_may_have_applied(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    sim.faults.add(Fault(route="update", kind=FaultKind.MALFORMED))
    with pytest.raises(ProviderMalformedReply) as caught:
        await client.update_cluster("tc-h100-reserved", ClusterUpdate(num_gpus=24))
    assert caught.value.provider_message == "the reply was not JSON"
    assert caught.value.may_have_applied
    assert len(sim.requests) == 1


async def test_reply_not_in_the_cluster_shape_is_malformed(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    del sim.clusters["tc-h200-ondemand"]["num_gpus"]
    with pytest.raises(ProviderMalformedReply) as caught:
        await client.get_cluster("tc-h200-ondemand")
    assert "num_gpus" in caught.value.provider_message
    with pytest.raises(ProviderMalformedReply) as listed:
        await client.list_clusters()
    assert "num_gpus" in listed.value.provider_message


async def test_hang_on_get_times_out_after_retries(sim: TogetherSimulator) -> None:
    sent = counting_transport()
    client = client_for(sim.base_url, settings=_with_total_timeout(0.3), transport=sent)
    sim.faults.add(Fault(route="get", kind=FaultKind.HANG, seconds=30, times=-1))
    try:
        with pytest.raises(ProviderTimeout) as caught:
            await client.get_cluster("tc-h100-reserved")
    finally:
        await client.aclose()
    assert not caught.value.may_have_applied
    # counted as sent: under load an attempt can time out before the simulator reads it
    assert [m for m, _ in sent.seen] == ["GET"] * FAST.attempts
    assert len(sim.calls("get")) <= FAST.attempts


async def test_hang_on_put_times_out_once(sim: TogetherSimulator) -> None:
    sent = counting_transport()
    client = client_for(sim.base_url, settings=_with_total_timeout(0.3), transport=sent)
    sim.faults.add(Fault(route="update", kind=FaultKind.HANG, seconds=30, times=-1))
    try:
        with pytest.raises(ProviderTimeout) as caught:
            await client.update_cluster("tc-h100-reserved", ClusterUpdate(num_gpus=24))
    finally:
        await client.aclose()
    assert caught.value.may_have_applied
    assert [m for m, _ in sent.seen] == ["PUT"]  # never sent twice
    assert len(sim.calls("update")) <= 1


async def test_connection_refused() -> None:
    client = client_for(f"http://127.0.0.1:{_closed_port()}/v1")
    try:
        with pytest.raises(ProviderConnectionError) as caught:
            await client.list_clusters()
        with pytest.raises(ProviderConnectionError):
            await client.update_cluster("tc-h100-reserved", ClusterUpdate(num_gpus=24))
    finally:
        await client.aclose()
    assert not caught.value.may_have_applied


async def test_apply_then_fail_on_put(sim: TogetherSimulator, client: TogetherClient) -> None:
    sim.faults.add(Fault(route="update", kind=FaultKind.APPLY_THEN_FAIL, status=500))
    with pytest.raises(ProviderServerError) as caught:
        await client.update_cluster("tc-h100-reserved", ClusterUpdate(num_gpus=24))
    assert caught.value.may_have_applied
    assert len(sim.calls("update")) == 1
    assert sim.clusters["tc-h100-reserved"]["num_gpus"] == 24


async def test_apply_then_502_is_retried_safely(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    sim.faults.add(Fault(route="update", kind=FaultKind.APPLY_THEN_FAIL, status=502))
    cluster = await client.update_cluster("tc-h100-reserved", ClusterUpdate(num_gpus=24))
    # An absolute target: sending it twice leaves the same cluster as sending it once.
    assert cluster.num_gpus == 24
    assert len(cluster.gpu_worker_nodes) == 3
    assert len(sim.calls("update")) == 2


# -- the adapter over HTTP -----------------------------------------------------------------
async def test_adapter_get_plan_apply(sim: TogetherSimulator, client: TogetherClient) -> None:
    adapter = TogetherAdapter(client, "ml-prod")
    state = await adapter.get_cluster("tc-b200-pool")
    assert state.summary.project == "ml-prod"
    assert state.current["num_capacity_pool_gpus"] == 16
    plan = adapter.plan(state, "update", {"num_gpus": "48", "num_capacity_pool_gpus": "24"})
    assert plan.body == {"num_gpus": 48, "num_capacity_pool_gpus": 24}
    outcome = await adapter.apply(plan)
    assert outcome.message == "Together accepted the update"
    assert outcome.summary is not None and outcome.summary.details["num_gpus"] == 48
    assert not outcome.summary.steady
    assert sim.clusters["tc-b200-pool"]["num_capacity_pool_gpus"] == 24
    assert [r.body for r in sim.calls("update")] == [plan.body]


async def test_adapter_refuses_a_gpu_count_not_a_multiple_of_8_before_any_call(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    adapter = TogetherAdapter(client, "ml-prod")
    state = await adapter.get_cluster("tc-h100-reserved")
    for field in ("num_gpus", "num_preemptible_gpus"):
        with pytest.raises(RuleViolation) as caught:
            adapter.plan(state, "update", {field: "20"})
        assert caught.value.field == field
        assert f"{field} must be a multiple of 8 (got 20; try 16 or 24)" == caught.value.message
    assert sim.calls("update") == []


async def test_adapter_lists_summaries(client: TogetherClient) -> None:
    adapter = TogetherAdapter(client, "ml-prod")
    summaries = {s.cluster_id: s for s in await adapter.list_clusters()}
    assert summaries["tc-booting"].steady is False
    assert summaries["tc-h100-sched"].billing == "SCHEDULED_CAPACITY"
    assert summaries["tc-b200-pool"].details["capacity_pool_id"] == "pool-b200-1"
    assert summaries["tc-h200-ondemand"].details["capacity_pool_id"] is None
    assert summaries["tc-h200-ondemand"].details["cluster_type"] == ClusterType.SLURM
    await adapter.aclose()


# -- secrets -------------------------------------------------------------------------------
LEAK_KEY = "tk-LEAKCHECK-7d1f0c9a4e2b"
WRONG_KEY = "tk-WRONGKEY-3b8e5a1d6c0f"


async def test_api_key_never_reaches_logs_or_exception_texts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for name in ("", "httpx", "httpcore", "aiohttp", "stamina", "asyncio"):
        caplog.set_level(logging.DEBUG, logger=name)
    errors: list[ProviderError] = []
    async with running_simulator(api_key=LEAK_KEY) as sim:
        client = client_for(sim.base_url, LEAK_KEY, settings=_with_total_timeout(0.15))
        wrong = client_for(sim.base_url, WRONG_KEY)
        refused = client_for(f"http://127.0.0.1:{_closed_port()}/v1", LEAK_KEY)
        faults = [
            Fault(route="*", kind=FaultKind.RATE_LIMIT, times=-1),
            Fault(route="*", kind=FaultKind.SERVER_ERROR, status=503, times=-1),
            Fault(route="*", kind=FaultKind.MALFORMED, times=-1),
            Fault(route="*", kind=FaultKind.HANG, seconds=0.3, times=-1),
            Fault(route="*", kind=FaultKind.APPLY_THEN_FAIL, status=500, times=-1),
        ]
        try:
            for fault in faults:
                sim.faults.clear()
                sim.faults.add(fault)
                errors += await _failures(client)
            sim.faults.clear()
            errors += await _failures(wrong)
            errors += await _failures(refused)
        finally:
            for together in (client, wrong, refused):
                await together.aclose()
    assert len(errors) >= 15
    texts = [caplog.text]
    for error in errors:
        texts += [str(error), repr(error), error.user_message]
        texts += traceback.format_exception(error)
    blob = "\n".join(texts)
    assert "; retry 1 in" in caplog.text  # logging was live
    assert LEAK_KEY not in blob
    assert WRONG_KEY not in blob


async def _failures(client: TogetherClient) -> list[ProviderError]:
    calls = [
        client.list_clusters(),
        client.get_cluster("tc-h100-sched"),
        client.update_cluster("tc-h100-sched", ClusterUpdate(num_gpus=24)),
    ]
    results = []
    for call in calls:
        try:
            await call
        except ProviderError as exc:
            results.append(exc)
    return results


# -- helpers -------------------------------------------------------------------------------
def _with_total_timeout(seconds: float) -> ClientSettings:
    return dataclasses.replace(FAST, total_timeout=seconds)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
