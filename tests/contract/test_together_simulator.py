"""The Together simulator on its own: the rules it enforces like the real service, reset,
project filtering, and which changes start provisioning."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from bot.local.simulators.base import Fault, FaultKind
from bot.local.simulators.together import TogetherSimulator
from tests.support.together_kit import running_simulator

AUTH = {"Authorization": "Bearer sim-together-key"}


@pytest.fixture
async def sim() -> AsyncIterator[TogetherSimulator]:
    async with running_simulator(transition_seconds=0.2) as simulator:
        yield simulator


@pytest.fixture
async def http(sim: TogetherSimulator) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sim.base_url + "/", headers=AUTH) as client:
        yield client


def _iso(delta: timedelta) -> str:
    return (datetime.now(UTC) + delta).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("cluster_id", "body", "message"),
    [
        (
            "tc-h200-ondemand",
            {"num_capacity_pool_gpus": 8},
            "clusters created with capacity_pool_id",
        ),
        ("tc-b200-pool", {"num_capacity_pool_gpus": 40}, "less than or equal to num_gpus"),
        ("tc-b200-pool", {"num_gpus": 8}, "less than or equal to num_gpus"),
        ("tc-b200-pool", {"num_capacity_pool_gpus": 12}, "must be a multiple of 8"),
        ("tc-h100-reserved", {"num_gpus": 12}, "num_gpus must be a multiple of 8"),
        (
            "tc-h100-reserved",
            {"add_ons": [{"name": "grafana", "config": {"dashboard": {"enabled": True}}}]},
            "add-on 'grafana' does not exist on this cluster (its add-ons: kubernetes-dashboard)",
        ),
        (
            "tc-h100-reserved",
            {"add_ons": [{"name": "kubernetes-dashboard", "config": {"grafana": {}}}]},
            "add_ons config keys must be among",
        ),
        (
            "tc-h100-reserved",
            {"cluster_config": {"ssh_ca_enabled": True}},
            "cluster_config.load_balancer is required",
        ),
        (
            "tc-h100-reserved",
            {"cluster_config": {"load_balancer": "NONE", "gpus": 8}},
            "unknown field(s) in cluster_config: gpus",
        ),
        ("tc-h100-sched", {"num_reserved_gpus": 8}, "only applicable to RESERVED clusters"),
        ("tc-h200-ondemand", {"reservation_end_time": _iso(timedelta(days=1))}, "prepaid"),
        ("tc-h100-reserved", {"reservation_end_time": _iso(-timedelta(days=1))}, "in the future"),
        ("tc-h100-reserved", {"reservation_end_time": "2026-10-01T00:00:00"}, "time zone"),
        ("tc-h100-reserved", {"num_gpus": True}, "num_gpus must be an integer"),
    ],
)
async def test_rules_are_enforced_with_400(
    sim: TogetherSimulator,
    http: httpx.AsyncClient,
    cluster_id: str,
    body: dict[str, Any],
    message: str,
) -> None:
    before = dict(sim.clusters[cluster_id])
    response = await http.put(f"compute/clusters/{cluster_id}", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert message in error["message"]
    assert error["type"] == "invalid_request_error"
    assert sim.clusters[cluster_id] == before


async def test_an_sdk_update_of_only_add_ons_or_only_cluster_config_is_applied(
    sim: TogetherSimulator, http: httpx.AsyncClient
) -> None:
    """The official SDK sends ``add_ons`` or ``cluster_config`` alone (a config-only update):
    accepted, merged into the cluster, and no reprovisioning."""
    add_ons = {"add_ons": [{"name": "kubernetes-dashboard", "config": {"dashboard": {}}}]}
    assert sim.clusters["tc-h100-reserved"]["cluster_type"] == "KUBERNETES"
    response = await http.put("compute/clusters/tc-h100-reserved", json=add_ons)
    assert response.status_code == 200, response.text
    disabled = {
        "add_ons": [{"name": "kubernetes-dashboard", "config": {"dashboard": {"enabled": False}}}]
    }
    response = await http.put("compute/clusters/tc-h100-reserved", json=disabled)
    assert response.status_code == 200, response.text
    assert response.json()["add_ons"][0]["config"] == {"dashboard": {"enabled": False}}
    config = {"cluster_config": {"load_balancer": "TRAEFIK", "ssh_ca_enabled": True}}
    response = await http.put("compute/clusters/tc-h100-reserved", json=config)
    assert response.status_code == 200, response.text
    cluster = response.json()
    assert cluster["cluster_config"]["load_balancer"] == "TRAEFIK"
    assert cluster["cluster_config"]["ssh_ca_enabled"] is True
    assert cluster["cluster_config"]["observability"] == {"enabled": True}  # kept
    assert (cluster["status"], cluster["num_gpus"]) == ("Ready", 16)


async def test_unknown_cluster_and_bad_key(http: httpx.AsyncClient, sim: TogetherSimulator) -> None:
    missing = await http.put("compute/clusters/tc-nope", json={"num_gpus": 8})
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "cluster tc-nope not found"
    unauthorized = await http.get("compute/clusters", headers={"Authorization": "Bearer nope"})
    assert unauthorized.status_code == 401
    assert unauthorized.json() == {
        "error": {
            "message": "Invalid API key provided",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    assert [r.route for r in sim.requests] == ["update", "list"]


async def test_project_filter(http: httpx.AsyncClient) -> None:
    other = await http.get("compute/clusters", params={"projectId": "proj-999"})
    assert [c["cluster_id"] for c in other.json()["clusters"]] == ["tc-other-proj"]
    nobody = await http.get("compute/clusters", params={"projectId": "proj-000"})
    assert nobody.json() == {"clusters": []}


async def test_a_new_end_time_alone_does_not_reprovision(http: httpx.AsyncClient) -> None:
    end = _iso(timedelta(days=50))
    response = await http.put("compute/clusters/tc-h100-sched", json={"reservation_end_time": end})
    assert response.status_code == 200
    assert response.json()["status"] == "Ready"
    assert response.json()["reservation_end_time"] == end


async def test_a_no_op_update_is_accepted_without_reprovisioning(http: httpx.AsyncClient) -> None:
    response = await http.put("compute/clusters/tc-h200-ondemand", json={"num_gpus": 8})
    assert response.status_code == 200
    assert response.json()["status"] == "Ready"


async def test_reset_reseeds_and_forgets(sim: TogetherSimulator, http: httpx.AsyncClient) -> None:
    await http.put("compute/clusters/tc-h100-reserved", json={"num_gpus": 32})
    sim.clusters["tc-h200-ondemand"]["status"] = "Hibernating"
    sim.faults.add(Fault(route="get", kind=FaultKind.SERVER_ERROR, times=-1))
    reset = await http.post(f"http://127.0.0.1:{sim.port}/_sim/reset")
    assert reset.status_code == 200
    assert sim.requests == []
    cluster = (await http.get("compute/clusters/tc-h100-reserved")).json()
    assert (cluster["num_gpus"], cluster["status"]) == (16, "Ready")
    assert sim.clusters["tc-h200-ondemand"]["status"] == "Ready"


async def test_an_update_during_provisioning_restarts_it(
    sim: TogetherSimulator, http: httpx.AsyncClient
) -> None:
    first = await http.put("compute/clusters/tc-h200-ondemand", json={"num_gpus": 16})
    assert first.json()["status"] == "WaitingForDataPlaneNodes"
    second = await http.put("compute/clusters/tc-h200-ondemand", json={"num_gpus": 24})
    body = second.json()
    assert body["status"] == "WaitingForDataPlaneNodes"
    assert len(body["gpu_worker_nodes"]) == 3
    assert [e["reason"] for e in body["node_lifecycle_events"]] == ["TogetherScaledUp"] * 2
    assert len({n["node_id"] for n in body["gpu_worker_nodes"]}) == 3


async def test_base_url_needs_a_started_server() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        _ = TogetherSimulator().base_url
