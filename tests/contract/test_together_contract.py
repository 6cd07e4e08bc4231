"""Every request the Together client sends and every reply the simulator gives matches the
DERIVED spec (the current API); the official spec's subset holds too where it applies."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.local.simulators.base import RecordedRequest
from bot.local.simulators.together import TogetherSimulator
from bot.providers.errors import ProviderError
from bot.providers.http import Operation, RetryMode
from bot.providers.together import ClusterType, ClusterUpdate, TogetherAdapter, TogetherCluster
from tests.support.openapi_contract import TOGETHER_OFFICIAL_SPEC, TOGETHER_SPEC, Spec, load_spec
from tests.support.together_kit import Exchange, RecordingTransport, client_for, running_simulator

DERIVED = load_spec(TOGETHER_SPEC)
OFFICIAL = load_spec(TOGETHER_OFFICIAL_SPEC)
OFFICIAL_UPDATE_FIELDS = {"cluster_type", "num_gpus", "reservation_end_time"}


def _in_days(days: int) -> datetime:
    return (datetime.now(UTC) + timedelta(days=days)).replace(microsecond=0)


UPDATES: list[tuple[str, ClusterUpdate]] = [
    ("tc-h100-reserved", ClusterUpdate(num_gpus=24)),
    ("tc-h100-reserved", ClusterUpdate(reservation_end_time=_in_days(45))),
    ("tc-h200-ondemand", ClusterUpdate(cluster_type=ClusterType.KUBERNETES, num_gpus=16)),
    ("tc-h200-ondemand", ClusterUpdate(num_preemptible_gpus=16)),
    (
        "tc-b200-pool",
        ClusterUpdate(
            cluster_type=ClusterType.SLURM,
            num_gpus=48,
            num_reserved_gpus=24,
            num_preemptible_gpus=8,
            num_capacity_pool_gpus=24,
            reservation_end_time=_in_days(60),
        ),
    ),
    ("tc-h100-sched", ClusterUpdate(num_gpus=8, reservation_end_time=_in_days(3))),
    ("tc-booting", ClusterUpdate(num_gpus=0)),
]


async def _exercise(sim: TogetherSimulator, recorder: RecordingTransport) -> None:
    """Drive every client call against the simulator, letting transitions finish."""
    everyone = client_for(sim.base_url, transport=recorder)
    scoped = client_for(sim.base_url, project_id="proj-123", transport=recorder)
    try:
        await everyone.list_clusters()
        await scoped.list_clusters()
        for cluster_id in list(sim.clusters):
            await everyone.get_cluster(cluster_id)
        for cluster_id, update in UPDATES:
            await everyone.update_cluster(cluster_id, update)
            await everyone.get_cluster(cluster_id)
        await asyncio.sleep(sim.transition_seconds * 1.2)
        await everyone.list_clusters()
        adapter = TogetherAdapter(everyone, "ml-prod")
        state = await adapter.get_cluster("tc-h100-sched")
        await adapter.apply(adapter.plan(state, "update", {"num_gpus": "24"}))
    finally:
        await everyone.aclose()
        await scoped.aclose()


@pytest.fixture
async def exchanges() -> tuple[list[RecordedRequest], list[Exchange]]:
    recorder = RecordingTransport()
    async with running_simulator(transition_seconds=0.1) as sim:
        await _exercise(sim, recorder)
        return list(sim.requests), recorder.exchanges


def _validate_request(spec: Spec, request: RecordedRequest) -> None:
    template = spec.match_path(request.path, prefix="/v1")
    spec.validate_request(request.method, template, query=request.query, body=request.body)


async def test_every_request_matches_the_derived_spec(
    exchanges: tuple[list[RecordedRequest], list[Exchange]],
) -> None:
    requests, _ = exchanges
    assert {r.route for r in requests} == {"list", "get", "update"}
    for request in requests:
        _validate_request(DERIVED, request)
    queries = [r.query for r in requests if r.route == "list"]
    assert {"projectId": "proj-123"} in queries and {} in queries


async def test_every_reply_matches_the_derived_spec(
    exchanges: tuple[list[RecordedRequest], list[Exchange]],
) -> None:
    _, replies = exchanges
    assert {(e.method, e.status) for e in replies} == {("GET", 200), ("PUT", 200)}
    for reply in replies:
        template = DERIVED.match_path(reply.path, prefix="/v1")
        DERIVED.validate_response(reply.method, template, reply.status, reply.body)


async def test_official_subset_requests_and_replies_match_the_official_spec(
    exchanges: tuple[list[RecordedRequest], list[Exchange]],
) -> None:
    requests, replies = exchanges
    subset = [r for r in requests if r.method == "PUT" and set(r.body) <= OFFICIAL_UPDATE_FIELDS]
    assert len(subset) >= 4
    for request in subset:
        _validate_request(OFFICIAL, request)
    for reply in replies:
        template = OFFICIAL.match_path(reply.path, prefix="/v1")
        OFFICIAL.validate_response(reply.method, template, reply.status, reply.body)


async def test_seeded_clusters_are_valid_clusters() -> None:
    sim = TogetherSimulator()
    assert set(sim.clusters) == {
        "tc-h100-reserved",
        "tc-h200-ondemand",
        "tc-b200-pool",
        "tc-h100-sched",
        "tc-booting",
        "tc-other-proj",
    }
    for cluster_id, raw in sim.clusters.items():
        DERIVED.validate_response("GET", "/compute/clusters/{cluster_id}", 200, raw)
        OFFICIAL.validate_response("GET", "/compute/clusters/{cluster_id}", 200, raw)
        cluster = TogetherCluster.model_validate(raw)
        assert cluster.cluster_id == cluster_id
        assert len(cluster.gpu_worker_nodes) * 8 == cluster.num_gpus
    seeded = {cid: TogetherCluster.model_validate(raw) for cid, raw in sim.clusters.items()}
    reserved = seeded["tc-h100-reserved"]
    assert (reserved.billing_type, reserved.cluster_type, reserved.gpu_type) == (
        "RESERVED",
        "KUBERNETES",
        "H100_SXM",
    )
    assert (reserved.num_gpus, reserved.num_reserved_gpus, reserved.region) == (
        16,
        16,
        "us-central-8",
    )
    assert reserved.reservation_start_time is not None
    assert reserved.reservation_end_time is not None
    assert seeded["tc-b200-pool"].capacity_pool_id == "pool-b200-1"
    assert seeded["tc-b200-pool"].num_capacity_pool_gpus == 16
    assert seeded["tc-h100-sched"].billing_type == "SCHEDULED_CAPACITY"
    assert seeded["tc-booting"].status == "WaitingForDataPlaneNodes"
    assert seeded["tc-other-proj"].project_id == "proj-999"
    assert {c.project_id for cid, c in seeded.items() if cid != "tc-other-proj"} == {"proj-123"}


async def test_error_replies_use_the_official_error_shape() -> None:
    recorder = RecordingTransport()
    async with running_simulator() as sim:
        good = client_for(sim.base_url, transport=recorder)
        bad = client_for(sim.base_url, "wrong-key", transport=recorder)
        try:
            for call in (
                bad.list_clusters(),
                good.get_cluster("tc-missing"),
                good.update_cluster("tc-h200-ondemand", ClusterUpdate(num_reserved_gpus=8)),
            ):
                with pytest.raises(ProviderError):
                    await call
        finally:
            await good.aclose()
            await bad.aclose()
    assert [e.status for e in recorder.exchanges] == [401, 404, 400]
    for reply in recorder.exchanges:
        _validate_error_body(OFFICIAL, reply.body)


def _validate_error_body(spec: Spec, body: Any) -> None:
    spec._validate({"$ref": "#/components/schemas/ErrorData"}, body, "error reply")


async def test_simulator_refuses_bodies_outside_the_spec() -> None:
    async with running_simulator() as sim:
        client = client_for(sim.base_url)
        transport = client.transport
        try:
            for body, message in [
                ({"num_gpus": "16"}, "num_gpus must be an integer"),
                ({"num_gpus": -8}, "num_gpus must be a non-negative integer"),
                ({"cluster_type": "NOMAD"}, "cluster_type must be one of KUBERNETES, SLURM"),
                ({"add_ons": [], "node_count": 2}, "unknown field(s) in update: node_count"),
                ({}, "update must set at least one field"),
                ([1], "request body must be a JSON object"),
                ({"reservation_end_time": "soon"}, "is not an RFC 3339 date-time"),
            ]:
                response = await transport.request(
                    "PUT",
                    "compute/clusters/tc-h100-reserved",
                    operation=Operation.CHANGE_CLUSTER,
                    mode=RetryMode.IDEMPOTENT_WRITE,
                    json=body,
                )
                assert response.status_code == 400
                assert message in response.json()["error"]["message"]
        finally:
            await client.aclose()
    assert sim.clusters["tc-h100-reserved"]["num_gpus"] == 16
