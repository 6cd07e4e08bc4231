"""The E2E client and simulator against the reconstructed OpenAPI spec and the doc examples."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from bot.local.simulators.e2e import E2ESimulator
from bot.providers.e2e import (
    ACTION_ADAPTER,
    ACTIONS,
    E2EClusterDetail,
    E2EClusterListItem,
    to_summary,
)
from tests.support.e2e_kit import (
    API_KEY,
    AUTH_TOKEN,
    PREFIX,
    doc_examples,
    make_adapter,
    make_client,
    running_simulator,
)
from tests.support.openapi_contract import E2E_SPEC, load_spec

SPEC = load_spec(E2E_SPEC)
CLUSTERS = "/distributed_jobs_v2/cluster/"
CLUSTER = "/distributed_jobs_v2/cluster/{Cluster_Id}/"

# Written out here, independently of the client, from the SPEC §1.2 table.
EXPECTED_FIELDS: dict[str, set[str]] = {
    "update_ssh_keys": {"ssh_key_ids"},
    "update_image": {"image_version_id"},
    "restart_workers": set(),
    "restart_cluster": set(),
    "scale_cluster": {"additional_nodes"},
    "attach_ip": {"reserved_ip_id"},
    "detach_ip": {"reserved_ip_id", "ip_type"},
    "remove_security_group": {"security_group_id"},
    "add_security_group": {"security_groups_ids"},
}

# (action, raw input) in an order the seeded cluster 101 accepts one after the other.
ACTION_SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("update_ssh_keys", {"ssh_key_ids": "11,12"}),
    ("update_image", {"image_version_id": "5"}),
    ("restart_workers", {}),
    ("restart_cluster", {}),
    ("scale_cluster", {"additional_nodes": "2"}),
    ("attach_ip", {"reserved_ip_id": "501"}),
    ("detach_ip", {"reserved_ip_id": "501"}),
    ("add_security_group", {"security_groups_ids": "602,603"}),
    ("remove_security_group", {"security_group_id": "602"}),
]


@pytest.fixture
async def sim() -> AsyncIterator[E2ESimulator]:
    async with running_simulator() as server:
        yield server


async def test_every_client_request_matches_the_spec(sim: E2ESimulator) -> None:
    adapter = make_adapter(sim.base_url, active_iam=77, per_page=2)
    await adapter.list_clusters()
    for action, raw in ACTION_SCRIPT:
        state = await adapter.get_cluster("101")
        await adapter.apply(adapter.plan(state, action, raw))
    await adapter.aclose()

    assert {r.route for r in sim.requests} == {"list", "get", "action"}
    for recorded in sim.requests:
        template = SPEC.match_path(recorded.path, prefix=PREFIX)
        assert template in (CLUSTERS, CLUSTER)
        SPEC.validate_request(recorded.method, template, query=recorded.query, body=recorded.body)
        assert recorded.query["apikey"] == API_KEY
        assert recorded.query["active_iam"] == "77"
        assert recorded.headers["authorization"] == f"Bearer {AUTH_TOKEN}"


async def test_each_action_body_has_exactly_its_fields(sim: E2ESimulator) -> None:
    adapter = make_adapter(sim.base_url)
    for action, raw in ACTION_SCRIPT:
        state = await adapter.get_cluster("101")
        await adapter.apply(adapter.plan(state, action, raw))
    await adapter.aclose()

    bodies = [r.body for r in sim.calls("action")]
    assert [body["action"] for body in bodies] == [action for action, _ in ACTION_SCRIPT]
    assert sorted(body["action"] for body in bodies) == sorted(ACTIONS)
    for body in bodies:
        assert set(body) == {"action"} | EXPECTED_FIELDS[body["action"]]
        SPEC.validate_request(
            "PUT", CLUSTER, query={"project_id": 1, "location": "Delhi"}, body=body
        )
    detach = next(body for body in bodies if body["action"] == "detach_ip")
    assert detach["ip_type"] == "reserved"


async def test_simulator_replies_match_the_response_schemas(sim: E2ESimulator) -> None:
    scope = {"apikey": API_KEY, "project_id": "12345", "location": "Delhi"}
    headers = {"Authorization": f"Bearer {AUTH_TOKEN}"}
    async with httpx.AsyncClient(base_url=sim.base_url, headers=headers) as http:
        listed = await http.get("/distributed_jobs_v2/cluster/", params={**scope, "per_page": 3})
        SPEC.validate_response("GET", CLUSTERS, listed.status_code, listed.json())
        assert listed.json()["total_page_number"] == 2

        detail = await http.get("/distributed_jobs_v2/cluster/101/", params=scope)
        SPEC.validate_response("GET", CLUSTER, detail.status_code, detail.json())

        for action, raw in ACTION_SCRIPT:
            body = ACTION_ADAPTER.validate_python({"action": action, **_typed(raw)}).model_dump(
                mode="json"
            )
            reply = await http.put("/distributed_jobs_v2/cluster/101/", params=scope, json=body)
            assert reply.status_code == 200, reply.text
            SPEC.validate_response("PUT", CLUSTER, 200, reply.json())


def _typed(raw: dict[str, Any]) -> dict[str, Any]:
    typed: dict[str, Any] = {}
    for name, value in raw.items():
        if name.endswith("_ids"):
            typed[name] = [int(part) for part in value.split(",")]
        else:
            typed[name] = int(value)
    return typed


async def test_simulator_shapes_carry_the_documented_fields(sim: E2ESimulator) -> None:
    examples = doc_examples()
    doc_item = examples["list_clusters_200"]["body"]["data"][0]
    doc_detail = examples["get_cluster_200"]["body"]["data"]
    item = sim.list_item(sim.clusters[101])
    detail = sim.detail(sim.clusters[101])
    assert set(item) == set(doc_item)
    assert set(doc_detail) <= set(detail)
    assert isinstance(item["no_of_gpu"], str)
    assert item["node_memory"] == "2000GB"
    assert isinstance(detail["total_gpu"], int)
    assert detail["total_memory"] == "4000 GB"


def test_doc_example_list_and_detail_parse_with_the_models() -> None:
    examples = doc_examples()
    list_body = examples["list_clusters_200"]["body"]
    detail_body = examples["get_cluster_200"]["body"]
    SPEC.validate_response("GET", CLUSTERS, 200, list_body)
    SPEC.validate_response("GET", CLUSTER, 200, detail_body)

    item = E2EClusterListItem.model_validate(list_body["data"][0])
    detail = E2EClusterDetail.model_validate(detail_body["data"])
    assert (item.no_of_gpu, item.no_of_cpu, item.node_memory) == (8, 208, "2000 GB")
    assert item.available_memory == "0 GB"
    assert (detail.total_gpu, detail.total_cpu, detail.total_memory) == (8, 208, "2000 GB")
    assert detail.ssh_key_ids == [1001]
    assert detail.image_version is not None and detail.image_version.id == 2

    from_list = to_summary(item, "p", location="Delhi")
    from_detail = to_summary(detail, "p", location="Delhi")
    assert from_list.details == from_detail.details
    assert set(from_detail.details) == {"nodes", "gpus", "cpus", "memory", "sku", "image"}
    for name in ("gpu_type", "billing", "region", "size", "facts"):
        assert getattr(from_list, name) == getattr(from_detail, name), name
    assert from_detail.billing == "hourly · ₹1,995.20/h per node"
    assert (from_list.status, from_list.steady) == ("Creating", False)
    assert (from_detail.status, from_detail.steady) == ("Running", True)


def test_the_nine_action_models_validate_against_the_action_schema() -> None:
    samples: dict[str, dict[str, Any]] = {
        "update_ssh_keys": {"ssh_key_ids": [11]},
        "update_image": {"image_version_id": 5},
        "restart_workers": {},
        "restart_cluster": {},
        "scale_cluster": {"additional_nodes": 1},
        "attach_ip": {"reserved_ip_id": 501},
        "detach_ip": {"reserved_ip_id": 501},
        "remove_security_group": {"security_group_id": 601},
        "add_security_group": {"security_groups_ids": [602]},
    }
    assert set(samples) == set(ACTIONS)
    for action, fields in samples.items():
        body = ACTION_ADAPTER.validate_python({"action": action, **fields}).model_dump(mode="json")
        assert set(body) == {"action"} | EXPECTED_FIELDS[action]
        SPEC.validate_request(
            "PUT", CLUSTER, query={"project_id": 1, "location": "Delhi"}, body=body
        )


async def test_client_list_request_carries_paging_and_scope(sim: E2ESimulator) -> None:
    client = make_client(sim.base_url, per_page=4)
    await client.list_clusters()
    await client.aclose()
    queries = [r.query for r in sim.calls("list")]
    assert [q["page_no"] for q in queries] == ["1", "2"]
    assert all(q["per_page"] == "4" for q in queries)
    assert all(q["project_id"] == "12345" and q["location"] == "Delhi" for q in queries)
    assert all("active_iam" not in q for q in queries)
