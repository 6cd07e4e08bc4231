"""The E2E client and adapter against the simulator over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

import bot.providers.e2e.client as e2e_client
from bot.local.simulators.e2e import E2ESimulator
from bot.providers.e2e import (
    AddSecurityGroupAction,
    AttachIpAction,
    DetachIpAction,
    RemoveSecurityGroupAction,
    RestartClusterAction,
    ScaleClusterAction,
    UpdateImageAction,
    UpdateSshKeysAction,
    to_summary,
)
from bot.providers.errors import ProviderNotFound
from tests.support.e2e_kit import (
    API_KEY,
    AUTH_TOKEN,
    PREFIX,
    canned_server,
    make_adapter,
    make_client,
    running_simulator,
)


@pytest.fixture
async def sim() -> AsyncIterator[E2ESimulator]:
    async with running_simulator() as server:
        yield server


async def test_list_reads_every_page(sim: E2ESimulator) -> None:
    client = make_client(sim.base_url, per_page=2)
    clusters = await client.list_clusters()
    await client.aclose()
    assert [c.id for c in clusters] == [101, 102, 103, 104, 105, 106]
    assert [r.query["page_no"] for r in sim.calls("list")] == ["1", "2", "3"]
    first = clusters[0]
    assert (first.name, first.status, first.no_of_nodes) == ("train-h100-a", "Running", 2)
    assert (first.no_of_gpu, first.node_memory) == (8, "2000 GB")


async def test_list_in_another_project_and_location(sim: E2ESimulator) -> None:
    adapter = make_adapter(sim.base_url, project_id=23456, location="Chennai")
    summaries = await adapter.list_clusters()
    await adapter.aclose()
    assert [(s.cluster_id, s.region) for s in summaries] == [("201", "Chennai")]


async def test_get_cluster_parses_the_detail(sim: E2ESimulator) -> None:
    client = make_client(sim.base_url)
    cluster = await client.get_cluster(101)
    await client.aclose()
    assert (cluster.total_gpu, cluster.total_cpu, cluster.total_memory) == (16, 416, "4000 GB")
    assert cluster.ssh_key_ids == [1001]
    assert cluster.image_version is not None
    assert (cluster.image_version.id, cluster.image_version.name) == (2, "Ubuntu Slurm")
    assert cluster.specs is not None and cluster.specs.name == "GDC.8xH10080-208.2000GB_SXM_v1"


async def test_adapter_state_and_summary(sim: E2ESimulator) -> None:
    adapter = make_adapter(sim.base_url)
    state = await adapter.get_cluster("101")
    await adapter.aclose()
    assert state.current == {
        "status": "Running",
        "no_of_nodes": 2,
        "image_version_id": 2,
        "ssh_key_ids": [1001],
    }
    summary = state.summary
    assert summary.provider == "e2e" and summary.project == "e2e-delhi"
    assert (summary.cluster_id, summary.name) == ("101", "train-h100-a")
    details = summary.details
    assert (details["nodes"], details["gpus"], details["cpus"]) == (2, 16, 416)
    assert details["memory"] == "4000 GB"
    assert details["image"] == "Ubuntu Slurm v2-slurm25.11-ubuntu24.04 (id 2)"
    assert (details["sku"], summary.gpu_type) == ("GDC.8xH10080-208.2000GB_SXM_v1", "H100")
    assert (summary.region, summary.billing) == (
        "Delhi",
        "hourly · ₹1,995.20/h per node · ₹3,990.40/h for 2 nodes",
    )
    assert summary.steady is True
    assert summary.size == "2 nodes"
    assert [(f.label, f.value) for f in summary.facts] == [
        ("Nodes / GPUs", "2 nodes · 16 x H100"),
        ("CPUs / memory", "416 CPUs · 4000 GB"),
        ("Image", "Ubuntu Slurm v2-slurm25.11-ubuntu24.04 (id 2)"),
        ("SKU", "GDC.8xH10080-208.2000GB_SXM_v1"),
        ("Region", "Delhi"),
        ("Billing", "hourly · ₹1,995.20/h per node · ₹3,990.40/h for 2 nodes"),
        ("Public IP", "none attached"),
        ("Security groups", "default (601)"),
    ]


async def test_an_attached_ip_and_added_security_group_show_in_the_summary(
    sim: E2ESimulator,
) -> None:
    """The detail after attach_ip / add_security_group says how the cluster is reached and
    guarded (ssh_public_ip, has_floating_ip, reserve_ip, security groups, clone_data)."""
    client = make_client(sim.base_url)
    await client.run_action(101, AttachIpAction(reserved_ip_id=501))
    await client.run_action(101, AddSecurityGroupAction(security_groups_ids=[602]))
    cluster = await client.get_cluster(101)
    await client.aclose()
    assert (cluster.ssh_public_ip, cluster.has_floating_ip) == ("10.8.220.7", True)
    assert cluster.reserve_ip is not None and cluster.reserve_ip.id == 501
    assert isinstance(cluster.clone_data, dict) and cluster.clone_data["security_group_id"] == 601
    facts = {f.label: f.value for f in to_summary(cluster, "e2e-delhi").facts}
    assert facts["Public IP"] == "10.8.220.7 (reserved IP 501)"
    assert facts["Security groups"] == "default (601), ssh-only (602)"


async def test_unknown_cluster_is_not_found(sim: E2ESimulator) -> None:
    adapter = make_adapter(sim.base_url)
    with pytest.raises(ProviderNotFound) as caught:
        await adapter.get_cluster("999")
    await adapter.aclose()
    assert "Cluster not found" in caught.value.provider_message
    assert len(sim.calls("get")) == 1  # a 404 is an answer, not retried


async def test_credentials_and_scope_on_every_call(sim: E2ESimulator) -> None:
    adapter = make_adapter(sim.base_url, active_iam=4242, per_page=3)
    await adapter.list_clusters()
    state = await adapter.get_cluster("101")
    await adapter.apply(adapter.plan(state, "attach_ip", {"reserved_ip_id": "502"}))
    await adapter.aclose()
    assert {r.route for r in sim.requests} == {"list", "get", "action"}
    for recorded in sim.requests:
        assert recorded.headers["authorization"] == f"Bearer {AUTH_TOKEN}"
        assert recorded.query["apikey"] == API_KEY
        assert recorded.query["project_id"] == "12345"
        assert recorded.query["location"] == "Delhi"
        assert recorded.query["active_iam"] == "4242"


async def test_active_iam_absent_when_not_set(sim: E2ESimulator) -> None:
    client = make_client(sim.base_url)
    await client.get_cluster(101)
    await client.aclose()
    assert "active_iam" not in sim.requests[0].query


async def test_run_action_parses_each_reply_kind(sim: E2ESimulator) -> None:
    client = make_client(sim.base_url)
    scaled = await client.run_action(101, ScaleClusterAction(additional_nodes=2))
    assert scaled.cluster is not None and scaled.cluster.no_of_nodes == 4
    assert scaled.cluster.status == "Scaling"

    imaged = await client.run_action(101, UpdateImageAction(image_version_id=3))
    assert imaged.cluster is not None and imaged.cluster.image_version is not None
    assert imaged.cluster.image_version.id == 3

    keyed = await client.run_action(101, UpdateSshKeysAction(ssh_key_ids=[11, 12]))
    assert keyed.cluster is not None and keyed.cluster.ssh_key_ids == [11, 12]

    restarted = await client.run_action(101, RestartClusterAction())
    assert restarted.cluster is not None and restarted.cluster.status == "Restarting"

    attached = await client.run_action(101, AttachIpAction(reserved_ip_id=501))
    assert attached.cluster is None and attached.reserved_ip is not None
    assert (attached.reserved_ip.id, attached.reserved_ip.ip_address) == (501, "10.8.220.7")

    detached = await client.run_action(101, DetachIpAction(reserved_ip_id=501))
    assert (detached.cluster, detached.reserved_ip, detached.text) == (None, None, None)
    assert detached.message == "Reserved IP detached"

    added = await client.run_action(101, AddSecurityGroupAction(security_groups_ids=[602]))
    assert added.text == "Security groups added successfully"
    removed = await client.run_action(101, RemoveSecurityGroupAction(security_group_id=602))
    assert removed.text == "Security group removed successfully"
    await client.aclose()

    cluster = sim.clusters[101]
    assert (cluster.nodes, cluster.image_version_id, cluster.ssh_key_ids) == (4, 3, [11, 12])
    assert (cluster.reserved_ip_ids, cluster.security_group_ids) == ([], [601])


@pytest.mark.parametrize(
    ("action", "raw", "fetches"),
    [
        ("update_ssh_keys", {"ssh_key_ids": "11, 12"}, 0),
        ("update_image", {"image_version_id": 5}, 0),
        ("restart_workers", {}, 0),
        ("restart_cluster", {}, 0),
        ("scale_cluster", {"additional_nodes": "1"}, 0),
        ("attach_ip", {"reserved_ip_id": "501"}, 1),
        ("add_security_group", {"security_groups_ids": [602, 603]}, 1),
        ("remove_security_group", {"security_group_id": 601}, 1),
    ],
)
async def test_apply_builds_the_summary_fetching_only_when_needed(
    sim: E2ESimulator, action: str, raw: dict[str, Any], fetches: int
) -> None:
    adapter = make_adapter(sim.base_url)
    state = await adapter.get_cluster("101")
    outcome = await adapter.apply(adapter.plan(state, action, raw))
    await adapter.aclose()
    assert len(sim.calls("action")) == 1
    assert len(sim.calls("get")) == 1 + fetches
    assert outcome.summary is not None and outcome.summary.cluster_id == "101"
    assert outcome.message


async def test_apply_detach_ip_fetches_the_cluster(sim: E2ESimulator) -> None:
    sim.clusters[101].reserved_ip_ids.append(502)
    adapter = make_adapter(sim.base_url)
    state = await adapter.get_cluster("101")
    outcome = await adapter.apply(adapter.plan(state, "detach_ip", {"reserved_ip_id": "502"}))
    await adapter.aclose()
    assert sim.calls("action")[0].body == {
        "action": "detach_ip",
        "reserved_ip_id": 502,
        "ip_type": "reserved",
    }
    assert len(sim.calls("get")) == 2
    assert outcome.message == "Reserved IP detached"
    assert outcome.summary is not None and outcome.summary.status == "Running"
    assert sim.clusters[101].reserved_ip_ids == []


async def test_scaled_cluster_settles_back_to_running() -> None:
    async with running_simulator(transition_seconds=0.2) as sim:
        adapter = make_adapter(sim.base_url)
        state = await adapter.get_cluster("101")
        outcome = await adapter.apply(adapter.plan(state, "scale_cluster", {"additional_nodes": 2}))
        assert outcome.summary is not None
        assert (outcome.summary.status, outcome.summary.steady) == ("Scaling", False)
        assert outcome.summary.details["nodes"] == 4
        later = await adapter.get_cluster("101")
        async with asyncio.timeout(30):
            while not later.summary.steady:  # read until it settles, at the machine's pace
                await asyncio.sleep(0.05)
                later = await adapter.get_cluster("101")
        await adapter.aclose()
    assert (later.summary.status, later.summary.steady) == ("Running", True)
    assert later.summary.details["nodes"] == 4


def _page(ids: list[int], total_pages: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "code": 200,
        "data": [{"id": i, "name": f"c{i}", "status": "Running"} for i in ids],
        "errors": {},
        "message": "Success",
    }
    if total_pages is not None:
        body["total_page_number"] = total_pages
    return body


async def test_list_stops_when_a_server_repeats_the_same_page() -> None:
    async with canned_server() as server:
        server.answer(200, _page([1, 2], total_pages=1_000_000))
        client = make_client(server.base_url, per_page=2)
        clusters = await client.list_clusters()
        await client.aclose()
    assert [c.id for c in clusters] == [1, 2]
    assert server.hits == 2


async def test_list_stops_at_the_page_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(e2e_client, "MAX_PAGES", 4)
    hits = 0

    async def endless(request: web.Request) -> web.Response:
        nonlocal hits
        hits += 1
        page = int(request.query["page_no"])
        return web.json_response(_page([page], total_pages=10**9))

    app = web.Application()
    app.router.add_get(PREFIX + "/distributed_jobs_v2/cluster/", endless)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        client = make_client(f"http://127.0.0.1:{port}{PREFIX}", per_page=1)
        clusters = await client.list_clusters()
        await client.aclose()
    finally:
        await runner.cleanup()
    assert [c.id for c in clusters] == [1, 2, 3, 4]
    assert hits == 4


async def test_list_without_page_count_reads_while_pages_are_full() -> None:
    async with canned_server() as server:
        server.answer(200, _page([7], total_pages=None))
        client = make_client(server.base_url, per_page=5)
        clusters = await client.list_clusters()
        await client.aclose()
    assert [c.id for c in clusters] == [7]
    assert server.hits == 1
