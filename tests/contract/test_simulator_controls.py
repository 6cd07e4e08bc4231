"""The simulators' /_sim/ controls over HTTP (degrade, restore, remove a cluster; create and
resolve a Together remediation) and the fixes that make them answer the providers' own
clients: Together takes add_ons and cluster_config in an update, E2E ignores fields an
action does not use."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from bot.local.simulators.base import FaultKind
from bot.local.simulators.e2e import E2ESimulator
from bot.local.simulators.together import TogetherSimulator
from tests.support.e2e_kit import API_KEY, AUTH_TOKEN
from tests.support.e2e_kit import running_simulator as running_e2e
from tests.support.together_kit import running_simulator as running_together

TOGETHER_AUTH = {"Authorization": "Bearer sim-together-key"}
E2E_SCOPE = {"apikey": API_KEY, "project_id": "12345", "location": "Delhi"}
E2E_AUTH = {"Authorization": f"Bearer {AUTH_TOKEN}"}


@pytest.fixture
async def together() -> AsyncIterator[TogetherSimulator]:
    async with running_together(transition_seconds=0.2) as sim:
        yield sim


@pytest.fixture
async def e2e() -> AsyncIterator[E2ESimulator]:
    async with running_e2e() as sim:
        yield sim


def _root(sim: TogetherSimulator | E2ESimulator) -> str:
    return f"http://127.0.0.1:{sim.port}"


async def _together_status(http: httpx.AsyncClient, sim: TogetherSimulator, cid: str) -> Any:
    reply = await http.get(f"{sim.base_url}/compute/clusters/{cid}", headers=TOGETHER_AUTH)
    return reply.json()["status"] if reply.status_code == 200 else reply.status_code


async def test_together_degrade_restore_and_remove(together: TogetherSimulator) -> None:
    cid = "tc-h200-ondemand"
    async with httpx.AsyncClient(base_url=_root(together)) as http:
        assert (await http.post(f"/_sim/clusters/{cid}/degrade")).status_code == 200
        assert await _together_status(http, together, cid) == "Degraded"
        await http.post(f"/_sim/clusters/{cid}/degrade", json={"status": "Paused"})
        assert await _together_status(http, together, cid) == "Paused"
        assert (await http.post(f"/_sim/clusters/{cid}/restore")).status_code == 200
        assert await _together_status(http, together, cid) == "Ready"
        assert (await http.delete(f"/_sim/clusters/{cid}")).status_code == 200
        assert await _together_status(http, together, cid) == 404
        assert (await http.post(f"/_sim/clusters/{cid}/degrade")).status_code == 404
        assert (await http.delete(f"/_sim/clusters/{cid}")).status_code == 404


async def test_together_restores_a_booting_cluster_to_its_own_status(
    together: TogetherSimulator,
) -> None:
    async with httpx.AsyncClient(base_url=_root(together)) as http:
        await http.post("/_sim/clusters/tc-booting/degrade")
        await http.post("/_sim/clusters/tc-booting/restore")
        assert await _together_status(http, together, "tc-booting") == "WaitingForDataPlaneNodes"


async def test_together_remediation_controls(together: TogetherSimulator) -> None:
    cid = "tc-h100-reserved"
    listing = f"{together.base_url}/compute/clusters/{cid}/instances/-/remediations"
    async with httpx.AsyncClient(base_url=_root(together)) as http:
        created = await http.post(
            f"/_sim/clusters/{cid}/remediations", json={"node": 1, "xid": {"94": 2}}
        )
        assert created.status_code == 200
        item = created.json()
        assert (item["state"], item["instance_name"]) == ("PENDING_APPROVAL", f"{cid}-gpu-1")
        events = item["linked_alerts"][0]["annotation"]["xid"]["events"]
        assert events == [{"xid_code": "94", "count": 2, "mnemonic": "Contained ECC error"}]
        resolved = await http.post(
            f"/_sim/remediations/{item['id']}/resolve", json={"state": "AUTO_RESOLVED"}
        )
        assert resolved.json()["state"] == "AUTO_RESOLVED"
        pending = await http.get(
            listing, params={"state": "PENDING_APPROVAL"}, headers=TOGETHER_AUTH
        )
        assert pending.json() == {"remediations": [], "has_next": False, "next_page_token": ""}
        bad_node = await http.post(f"/_sim/clusters/{cid}/remediations", json={"node": 9})
        assert bad_node.status_code == 400
        assert (await http.post("/_sim/clusters/nope/remediations")).status_code == 404
        assert (await http.post("/_sim/remediations/nope/resolve")).status_code == 404
        await http.post("/_sim/reset")
    assert together.remediations.items == {}


async def test_together_takes_the_official_sdks_update_body(together: TogetherSimulator) -> None:
    body = {
        "num_gpus": 24,
        "add_ons": None,
        "cluster_config": {"load_balancer": "NONE"},
        "cluster_type": None,
        "num_reserved_gpus": None,
        "reservation_end_time": None,
    }
    async with httpx.AsyncClient() as http:
        reply = await http.put(
            f"{together.base_url}/compute/clusters/tc-h100-reserved",
            json=body,
            headers=TOGETHER_AUTH,
        )
    assert reply.status_code == 200, reply.text
    assert reply.json()["num_gpus"] == 24
    assert together.clusters["tc-h100-reserved"]["cluster_config"]["load_balancer"] == "NONE"


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"", "the body must be a JSON object"),
        (b"kind=latency", "the body must be a JSON object"),
        (b'{"route": "update"}', "kind: Field required"),
        (b'{"kind": "explode"}', "kind: Input should be 'latency'"),
        (b'{"kind": "latency", "seconds": "soon"}', "seconds: Input should be a valid number"),
    ],
)
async def test_a_fault_that_cannot_be_armed_is_a_400_naming_the_kinds(
    together: TogetherSimulator, e2e: E2ESimulator, body: bytes, problem: str
) -> None:
    async with httpx.AsyncClient() as http:
        for sim in (together, e2e):
            reply = await http.post(f"{_root(sim)}/_sim/faults", content=body)
            assert reply.status_code == 400, reply.text
            answer = reply.json()
            assert problem in answer["error"]
            assert answer["kinds"] == [kind.value for kind in FaultKind]
            assert "apply_then_fail" in answer["usage"]
            assert sim.faults.faults == []
        armed = await http.post(f"{_root(e2e)}/_sim/faults", json={"kind": "hang", "times": 2})
    assert armed.status_code == 200 and e2e.faults.faults[0].kind is FaultKind.HANG


async def test_a_degrade_with_a_body_that_is_not_json_still_degrades(e2e: E2ESimulator) -> None:
    async with httpx.AsyncClient(base_url=_root(e2e)) as http:
        bad = await http.post("/_sim/clusters/101/degrade", json={"status": 7})
        assert bad.status_code == 400 and bad.json()["error"] == "status must be a string"
        reply = await http.post("/_sim/clusters/101/degrade", content=b"not json")
    assert reply.status_code == 200 and e2e.clusters[101].status == "Failed"


async def test_e2e_degrade_restore_and_remove(e2e: E2ESimulator) -> None:
    detail = f"{e2e.base_url}/distributed_jobs_v2/cluster/101/"
    async with httpx.AsyncClient(base_url=_root(e2e)) as http:
        assert (await http.post("/_sim/clusters/101/degrade")).status_code == 200
        reply = await http.get(detail, params=E2E_SCOPE, headers=E2E_AUTH)
        assert reply.json()["data"]["status"] == "Failed"
        await http.post("/_sim/clusters/101/restore")
        reply = await http.get(detail, params=E2E_SCOPE, headers=E2E_AUTH)
        assert reply.json()["data"]["status"] == "Running"
        assert (await http.delete("/_sim/clusters/101")).status_code == 200
        reply = await http.get(detail, params=E2E_SCOPE, headers=E2E_AUTH)
        assert reply.status_code == 404
        assert (await http.post("/_sim/clusters/abc/degrade")).status_code == 404


async def test_e2e_ignores_fields_an_action_does_not_use(e2e: E2ESimulator) -> None:
    every_field = {
        "action": "scale_cluster",
        "additional_nodes": 1,
        "ssh_key_ids": [1001],
        "image_version_id": 2,
        "reserved_ip_id": 501,
        "ip_type": "reserved",
        "security_group_id": 601,
        "security_groups_ids": [602],
    }
    async with httpx.AsyncClient() as http:
        reply = await http.put(
            f"{e2e.base_url}/distributed_jobs_v2/cluster/101/",
            params=E2E_SCOPE,
            headers=E2E_AUTH,
            json=every_field,
        )
    assert reply.status_code == 200, reply.text
    cluster = e2e.clusters[101]
    assert cluster.nodes == 3
    assert (cluster.ssh_key_ids, cluster.reserved_ip_ids, cluster.security_group_ids) == (
        [1001],
        [],
        [601],
    )
