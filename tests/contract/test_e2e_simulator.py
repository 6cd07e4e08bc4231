"""The E2E simulator's own behaviour: auth, validation, effects, transitions, control."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from bot.local.simulators.e2e import E2ESimulator
from tests.support.e2e_kit import API_KEY, AUTH_TOKEN, running_simulator

SCOPE = {"apikey": API_KEY, "project_id": "12345", "location": "Delhi"}
BEARER = {"Authorization": f"Bearer {AUTH_TOKEN}"}


@pytest.fixture
async def sim() -> AsyncIterator[E2ESimulator]:
    async with running_simulator() as server:
        yield server


@pytest.fixture
async def http(sim: E2ESimulator) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sim.base_url) as client:
        yield client


def _control(sim: E2ESimulator, name: str) -> str:
    return f"http://127.0.0.1:{sim.port}/_sim/{name}"


async def _put(http: httpx.AsyncClient, cluster_id: int, body: Any) -> httpx.Response:
    return await http.put(
        f"/distributed_jobs_v2/cluster/{cluster_id}/", params=SCOPE, headers=BEARER, json=body
    )


async def test_missing_or_wrong_apikey_is_401_envelope(
    sim: E2ESimulator, http: httpx.AsyncClient
) -> None:
    for query in ({k: v for k, v in SCOPE.items() if k != "apikey"}, {**SCOPE, "apikey": "no"}):
        reply = await http.get("/distributed_jobs_v2/cluster/", params=query, headers=BEARER)
        assert reply.status_code == 401
        assert reply.json() == {
            "code": 401,
            "data": {},
            "errors": {"auth": ["invalid"]},
            "message": "Unauthorized",
        }
    assert len(sim.calls("list")) == 2  # refused requests are recorded too


async def test_missing_or_wrong_bearer_is_403_detail(http: httpx.AsyncClient) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": AUTH_TOKEN}):
        reply = await http.get("/distributed_jobs_v2/cluster/101/", params=SCOPE, headers=headers)
        assert reply.status_code == 403
        assert reply.json() == {"detail": "Authentication credentials were not provided."}


@pytest.mark.parametrize(
    "changes",
    [
        {"project_id": "abc"},
        {"project_id": "999"},
        {"location": "Chennai"},
        {"location": None},
        {"project_id": None},
    ],
)
async def test_unknown_project_or_location_is_400(
    http: httpx.AsyncClient, changes: dict[str, str | None]
) -> None:
    query = {k: v for k, v in {**SCOPE, **changes}.items() if v is not None}
    reply = await http.get("/distributed_jobs_v2/cluster/", params=query, headers=BEARER)
    assert reply.status_code == 400
    assert reply.json() == {"status_code": 400, "message": "Project not found"}


async def test_list_pagination_and_shape(http: httpx.AsyncClient) -> None:
    pages = []
    for page_no in (1, 2, 3):
        reply = await http.get(
            "/distributed_jobs_v2/cluster/",
            params={**SCOPE, "page_no": page_no, "per_page": 4},
            headers=BEARER,
        )
        pages.append(reply.json())
    assert [[c["id"] for c in p["data"]] for p in pages] == [[101, 102, 103, 104], [105, 106], []]
    assert all(p["total_page_number"] == 2 and p["total_count"] == 6 for p in pages)
    first = pages[0]["data"][0]
    assert (first["no_of_gpu"], first["no_of_cpu"], first["node_memory"]) == ("8", "208", "2000GB")
    assert pages[0]["data"][1]["status"] == "Creating"


async def test_chennai_project_sees_only_its_cluster(http: httpx.AsyncClient) -> None:
    query = {**SCOPE, "project_id": "23456", "location": "Chennai"}
    listed = await http.get("/distributed_jobs_v2/cluster/", params=query, headers=BEARER)
    assert [c["id"] for c in listed.json()["data"]] == [201]
    other = await http.get("/distributed_jobs_v2/cluster/101/", params=query, headers=BEARER)
    assert other.status_code == 404
    assert other.json()["code"] == 404 and other.json()["errors"]


async def test_detail_shape(http: httpx.AsyncClient) -> None:
    reply = await http.get("/distributed_jobs_v2/cluster/101/", params=SCOPE, headers=BEARER)
    data = reply.json()["data"]
    assert (data["total_gpu"], data["total_cpu"], data["total_memory"]) == (16, 416, "4000 GB")
    assert data["ssh_keys"][0]["pk"] == 1001
    assert data["image_version"]["version"] == "v2-slurm25.11-ubuntu24.04"
    assert len(data["worker_nodes"]) == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "explode"}, "action"),
        ({"additional_nodes": 1}, "action"),
        ({"action": "scale_cluster"}, "additional_nodes"),
        ({"action": "scale_cluster", "additional_nodes": "2"}, "additional_nodes"),
        ({"action": "scale_cluster", "additional_nodes": 0}, "additional_nodes"),
        ({"action": "scale_cluster", "additional_nodes": True}, "additional_nodes"),
        ({"action": "update_ssh_keys", "ssh_key_ids": []}, "ssh_key_ids"),
        ({"action": "update_ssh_keys", "ssh_key_ids": [11, "12"]}, "ssh_key_ids"),
        ({"action": "detach_ip", "reserved_ip_id": 501}, "ip_type"),
        ({"action": "detach_ip", "reserved_ip_id": 501, "ip_type": "public"}, "ip_type"),
        ({"action": "add_security_group", "security_group_id": 602}, "security_groups_ids"),
        ({"action": "update_image", "image_version_id": 9}, "image_version_id"),
        ({"action": "update_ssh_keys", "ssh_key_ids": [11, 77]}, "ssh_key_ids"),
        ({"action": "attach_ip", "reserved_ip_id": 599}, "reserved_ip_id"),
        ({"action": "detach_ip", "reserved_ip_id": 502, "ip_type": "reserved"}, "reserved_ip_id"),
        ({"action": "add_security_group", "security_groups_ids": [699]}, "security_groups_ids"),
        ({"action": "remove_security_group", "security_group_id": 603}, "security_group_id"),
        (["scale_cluster"], "non_field_errors"),
    ],
)
async def test_invalid_actions_are_400_envelopes(
    sim: E2ESimulator, http: httpx.AsyncClient, body: Any, field: str
) -> None:
    reply = await _put(http, 101, body)
    assert reply.status_code == 400
    payload = reply.json()
    assert (payload["code"], payload["data"], payload["message"]) == (400, {}, "Bad Request")
    assert field in payload["errors"]
    assert sim.clusters[101].nodes == 2


async def test_action_on_a_cluster_not_running_is_412(
    sim: E2ESimulator, http: httpx.AsyncClient
) -> None:
    reply = await _put(http, 102, {"action": "restart_cluster"})
    assert reply.status_code == 412
    payload = reply.json()
    assert payload["code"] == 412 and payload["data"] == {}
    assert "Creating" in payload["message"]
    assert payload["errors"]["detail"] == [payload["message"]]
    assert sim.clusters[102].status == "Creating"


async def test_unknown_cluster_is_404(http: httpx.AsyncClient) -> None:
    for path in ("/distributed_jobs_v2/cluster/999/", "/distributed_jobs_v2/cluster/abc/"):
        reply = await http.get(path, params=SCOPE, headers=BEARER)
        assert reply.status_code == 404
        assert reply.json()["message"] == "Cluster not found"
    put = await _put(http, 999, {"action": "restart_cluster"})
    assert put.status_code == 404


async def test_attach_ip_held_by_another_cluster_is_refused(
    sim: E2ESimulator, http: httpx.AsyncClient
) -> None:
    assert (await _put(http, 103, {"action": "attach_ip", "reserved_ip_id": 501})).is_success
    reply = await _put(http, 101, {"action": "attach_ip", "reserved_ip_id": 501})
    assert reply.status_code == 400
    assert sim.clusters[103].reserved_ip_ids == [501]
    assert sim.clusters[101].reserved_ip_ids == []


async def _status_when_settled(http: httpx.AsyncClient, path: str) -> str:
    """The first status read once the transition is over (read until it is, however slowly
    a busy machine runs), from a detail or the first item of a list."""
    while True:
        data = (await http.get(path, params=SCOPE, headers=BEARER)).json()["data"]
        status = str((data[0] if isinstance(data, list) else data)["status"])
        if status not in ("Updating", "Restarting"):
            return status
        await asyncio.sleep(0.05)


async def test_transitions_follow_elapsed_time() -> None:
    async with (
        running_simulator(transition_seconds=1.0) as sim,
        httpx.AsyncClient(base_url=sim.base_url) as http,
    ):
        reply = await _put(http, 101, {"action": "update_image", "image_version_id": 5})
        assert reply.json()["data"]["status"] == "Updating"
        assert reply.json()["data"]["image_version"]["id"] == 5
        busy = await _put(http, 101, {"action": "restart_workers"})
        assert busy.status_code == 412
        detail = "/distributed_jobs_v2/cluster/101/"
        assert await asyncio.wait_for(_status_when_settled(http, detail), 30) == "Running"
        restarted = await _put(http, 101, {"action": "restart_workers"})
        assert restarted.json()["data"]["status"] == "Restarting"
        listed = "/distributed_jobs_v2/cluster/"
        assert await asyncio.wait_for(_status_when_settled(http, listed), 30) == "Running"


async def test_reset_reseeds_and_forgets(sim: E2ESimulator, http: httpx.AsyncClient) -> None:
    await _put(http, 101, {"action": "scale_cluster", "additional_nodes": 3})
    sim.clusters[103].status = "Stopped"
    assert sim.clusters[101].nodes == 5
    reset = await http.post(_control(sim, "reset"))
    assert reset.json() == {"ok": True}
    assert sim.clusters[101].nodes == 2
    assert sim.clusters[103].status == "Running"
    assert sim.requests == []


async def test_faults_armed_over_http(sim: E2ESimulator, http: httpx.AsyncClient) -> None:
    armed = await http.post(_control(sim, "faults"), json={"route": "get", "kind": "server_error"})
    assert armed.is_success
    first = await http.get("/distributed_jobs_v2/cluster/101/", params=SCOPE, headers=BEARER)
    second = await http.get("/distributed_jobs_v2/cluster/101/", params=SCOPE, headers=BEARER)
    assert first.status_code == 500
    assert first.json()["code"] == 500 and first.json()["message"] == "injected fault"
    assert second.status_code == 200


async def test_rate_limit_fault_uses_the_string_errors_shape(
    sim: E2ESimulator, http: httpx.AsyncClient
) -> None:
    await http.post(
        _control(sim, "faults"), json={"route": "list", "kind": "rate_limit", "retry_after": 2}
    )
    reply = await http.get("/distributed_jobs_v2/cluster/", params=SCOPE, headers=BEARER)
    assert reply.status_code == 429
    assert reply.headers["Retry-After"] == "2"
    assert reply.json() == {"errors": "injected fault", "status_code": 429}


async def test_active_iam_must_be_a_number(http: httpx.AsyncClient) -> None:
    ok = await http.get(
        "/distributed_jobs_v2/cluster/", params={**SCOPE, "active_iam": "7"}, headers=BEARER
    )
    bad = await http.get(
        "/distributed_jobs_v2/cluster/", params={**SCOPE, "active_iam": "x"}, headers=BEARER
    )
    assert ok.status_code == 200
    assert bad.status_code == 400 and bad.json()["status_code"] == 400
