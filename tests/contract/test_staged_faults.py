"""The simulator's staged-scale faults (SPEC §14) over real HTTP: an update armed with
``new_nodes_unhealthy`` settles Ready with the nodes it added NotReady (the summary counts
them), and one armed with ``remediation_in_soak`` proposes a remediation on a node it added
once the cluster settled. The call itself is answered as usual, once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from bot.local.simulators.together import TogetherSimulator
from bot.providers.together import ClusterUpdate, TogetherClient, TogetherCluster
from bot.providers.together.summary import to_summary
from tests.support.together_kit import client_for, running_simulator

CLUSTER = "tc-h200-ondemand"


@pytest.fixture
async def sim() -> AsyncIterator[TogetherSimulator]:
    async with running_simulator() as simulator:
        yield simulator


@pytest.fixture
async def client(sim: TogetherSimulator) -> AsyncIterator[TogetherClient]:
    together = client_for(sim.base_url)
    yield together
    await together.aclose()


async def _arm(sim: TogetherSimulator, body: dict[str, object]) -> None:
    async with httpx.AsyncClient() as http:
        answer = await http.post(f"http://127.0.0.1:{sim.port}/_sim/faults", json=body)
    assert answer.status_code == 200, answer.text


async def _settled(client: TogetherClient) -> TogetherCluster:
    async with asyncio.timeout(30):
        while True:
            cluster = await client.get_cluster(CLUSTER)
            if cluster.steady:
                return cluster
            await asyncio.sleep(0.02)


async def test_new_nodes_stay_not_ready_once_the_cluster_is_ready(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    before = await client.get_cluster(CLUSTER)
    await _arm(sim, {"kind": "new_nodes_unhealthy", "route": "update"})
    await client.update_cluster(CLUSTER, ClusterUpdate(num_gpus=before.num_gpus + 16))
    cluster = await _settled(client)
    statuses = [n.status for n in cluster.gpu_worker_nodes]
    assert statuses.count("NotReady") == 2 and statuses.count("Ready") == len(statuses) - 2
    assert to_summary(cluster, "p").details["nodes_not_ready"] == 2
    assert len(sim.calls("update")) == 1


async def test_a_plain_update_settles_with_every_node_ready(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    before = await client.get_cluster(CLUSTER)
    await client.update_cluster(CLUSTER, ClusterUpdate(num_gpus=before.num_gpus + 8))
    cluster = await _settled(client)
    assert to_summary(cluster, "p").details["nodes_not_ready"] == 0


async def test_a_remediation_is_proposed_on_a_new_node_after_it_settled(
    sim: TogetherSimulator, client: TogetherClient
) -> None:
    before = await client.get_cluster(CLUSTER)
    await _arm(sim, {"kind": "remediation_in_soak", "route": "update", "seconds": 0.2})
    await client.update_cluster(CLUSTER, ClusterUpdate(num_gpus=before.num_gpus + 8))
    cluster = await _settled(client)
    added = {n.instance_id for n in cluster.gpu_worker_nodes} - {
        n.instance_id for n in before.gpu_worker_nodes
    }
    async with asyncio.timeout(30):
        while not sim.remediations.items:
            await asyncio.sleep(0.05)
            await client.get_cluster(CLUSTER)  # a read moves the simulator's clock on
    [item] = sim.remediations.items.values()
    assert item["cluster_id"] == CLUSTER and item["instance_id"] in added
