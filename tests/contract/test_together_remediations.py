"""Together node remediations end to end over HTTP: the client against the simulator
(listing across nodes with a state filter and every page, approve / reject / cancel, states
moving over time, "already decided", no second POST once one may have been processed), and
every request and reply checked against the DERIVED spec."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from bot.local.simulators.base import Fault, FaultKind
from bot.local.simulators.together import TogetherSimulator
from bot.local.simulators.together_remediations import NewRemediation, Resolution
from bot.providers.errors import AlreadyDecided, ProviderRequestError, ProviderServerError
from bot.providers.together.models import Remediation, RemediationMode, RemediationState
from bot.providers.together.remediations import RemediationClient, xid_summary
from tests.support.openapi_contract import TOGETHER_SPEC, load_spec
from tests.support.together_kit import RecordingTransport, client_for

DERIVED = load_spec(TOGETHER_SPEC)
PENDING_APPROVAL = [RemediationState.PENDING_APPROVAL]
CLUSTER = "tc-h100-reserved"


@pytest.fixture
async def sim() -> AsyncIterator[TogetherSimulator]:
    simulator = TogetherSimulator(transition_seconds=0.2, remediation_seconds=0.4)
    await simulator.start(port=0)
    try:
        yield simulator
    finally:
        await simulator.stop()


@pytest.fixture
def recorder() -> RecordingTransport:
    return RecordingTransport()


@pytest.fixture
async def client(
    sim: TogetherSimulator, recorder: RecordingTransport
) -> AsyncIterator[RemediationClient]:
    together = client_for(sim.base_url, transport=recorder)
    remediations = RemediationClient(together.transport, page_size=2)
    try:
        yield remediations
    finally:
        await remediations.aclose()


async def _settled(client: RemediationClient, item: Remediation, seconds: float) -> Remediation:
    deadline = asyncio.get_running_loop().time() + seconds
    current = item
    while not current.finished and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
        current = await client.get(item.cluster_id, item.instance_id, item.id)
    return current


async def test_lists_every_page_across_nodes_with_the_state_filter(
    sim: TogetherSimulator, client: RemediationClient
) -> None:
    for node in (0, 1, 0, 1, 0):
        sim.create_remediation(CLUSTER, NewRemediation(node=node))
    sim.create_remediation("tc-b200-pool", NewRemediation())
    sim.remediations.resolve("rem-0002", Resolution(state="AUTO_RESOLVED"))
    pending = await client.list_remediations(CLUSTER, states=PENDING_APPROVAL)
    assert [r.id for r in pending] == ["rem-0001", "rem-0003", "rem-0004", "rem-0005"]
    assert {r.instance_id for r in pending} == {f"i-{CLUSTER}-0", f"i-{CLUSTER}-1"}
    everything = await client.list_remediations(CLUSTER)
    assert len(everything) == 5
    lists = sim.calls("remediations")
    assert len(lists) == 2 + 3  # two a page: 4 pending in 2 pages, all 5 in 3
    assert all("/instances/-/remediations" in r.path for r in lists)
    assert lists[0].query == {"page_size": "2", "state": "PENDING_APPROVAL"}
    assert lists[1].query["page_token"]


async def test_a_remediation_carries_its_alert_annotation(
    sim: TogetherSimulator, client: RemediationClient
) -> None:
    sim.create_remediation(CLUSTER, NewRemediation(node=1, xid={"79": 3, "48": 1}))
    (item,) = await client.list_remediations(CLUSTER, states=PENDING_APPROVAL)
    assert item.node == f"{CLUSTER}-gpu-1"
    assert item.mode == RemediationMode.HOST_AWARE and item.awaiting_approval
    (alert,) = item.linked_alerts
    assert alert.title == "GPU Xid error"
    assert alert.summary_line == f"{CLUSTER}-gpu-1: Xid 79 x3, Xid 48 x1"
    assert alert.severity == "PHC_SEVERITY_CRITICAL"
    assert xid_summary(item.linked_alerts) == [("79", 3), ("48", 1)]
    assert item.create_time is not None


async def test_approve_moves_pending_running_succeeded(
    sim: TogetherSimulator, client: RemediationClient
) -> None:
    created = Remediation.model_validate(sim.create_remediation(CLUSTER, NewRemediation()))
    approved = await client.approve(created, comment="approved from Slack by U01ALICE")
    assert approved.state == RemediationState.PENDING
    assert approved.review_comment == "approved from Slack by U01ALICE"
    seen = {approved.state}
    current = approved
    deadline = asyncio.get_running_loop().time() + 10
    while not current.finished and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
        current = await client.get(CLUSTER, created.instance_id, created.id)
        seen.add(current.state)
    assert current.state == RemediationState.SUCCEEDED
    assert RemediationState.RUNNING in seen
    assert current.start_time is not None and current.end_time is not None
    (post,) = sim.calls("remediation_decision")
    assert post.path.endswith(f"/instances/{created.instance_id}/remediations/{created.id}/approve")
    assert post.body == {"comment": "approved from Slack by U01ALICE"}


async def test_a_failing_remediation_ends_failed_with_its_error(
    sim: TogetherSimulator, client: RemediationClient
) -> None:
    created = Remediation.model_validate(
        sim.create_remediation(CLUSTER, NewRemediation(outcome="FAILED"))
    )
    approved = await client.approve(created, mode=RemediationMode.REBOOT_VM)
    assert approved.mode == RemediationMode.REBOOT_VM
    final = await _settled(client, approved, 10)
    assert final.state == RemediationState.FAILED and final.error_message


async def test_reject_and_cancel_end_cancelled(
    sim: TogetherSimulator, client: RemediationClient
) -> None:
    first = Remediation.model_validate(sim.create_remediation(CLUSTER, NewRemediation()))
    second = Remediation.model_validate(sim.create_remediation(CLUSTER, NewRemediation(node=1)))
    rejected = await client.reject(first, comment="node is being drained by hand")
    assert rejected.state == RemediationState.CANCELLED
    assert rejected.review_comment == "node is being drained by hand"
    assert rejected.reviewed_by
    cancelled = await client.cancel(second)
    assert cancelled.state == RemediationState.CANCELLED
    bodies = [r.body for r in sim.calls("remediation_decision")]
    assert bodies == [{"comment": "node is being drained by hand"}, None]


@pytest.mark.parametrize("elsewhere", ["PENDING", "AUTO_RESOLVED", "CANCELLED"])
async def test_a_remediation_decided_elsewhere_is_already_decided(
    sim: TogetherSimulator, client: RemediationClient, elsewhere: str
) -> None:
    created = Remediation.model_validate(sim.create_remediation(CLUSTER, NewRemediation()))
    sim.remediations.resolve(created.id, Resolution(state=elsewhere))
    for decide in (client.approve(created), client.reject(created, comment="no")):
        with pytest.raises(AlreadyDecided) as caught:
            await decide
        assert caught.value.status == 400
        assert "PENDING_APPROVAL" in caught.value.provider_message
        assert not caught.value.may_have_applied


async def test_decisions_are_never_sent_twice_after_a_5xx_or_a_timeout(
    sim: TogetherSimulator, client: RemediationClient
) -> None:
    created = Remediation.model_validate(sim.create_remediation(CLUSTER, NewRemediation()))
    sim.faults.add(Fault(route="remediation_decision", kind=FaultKind.APPLY_THEN_FAIL, status=503))
    with pytest.raises(ProviderServerError) as caught:
        await client.approve(created)
    assert caught.value.may_have_applied
    assert len(sim.calls("remediation_decision")) == 1
    assert sim.remediations.view(created.id)["state"] != RemediationState.PENDING_APPROVAL


async def test_a_decision_refused_with_429_is_sent_again(
    sim: TogetherSimulator, client: RemediationClient
) -> None:
    created = Remediation.model_validate(sim.create_remediation(CLUSTER, NewRemediation()))
    sim.faults.add(Fault(route="remediation_decision", kind=FaultKind.RATE_LIMIT, retry_after=0))
    approved = await client.approve(created)
    assert approved.state == RemediationState.PENDING
    assert len(sim.calls("remediation_decision")) == 2


async def test_a_power_cycle_override_is_refused_before_any_call(
    sim: TogetherSimulator, client: RemediationClient
) -> None:
    created = Remediation.model_validate(sim.create_remediation(CLUSTER, NewRemediation()))
    with pytest.raises(ProviderRequestError):
        await client.approve(created, mode=RemediationMode.HOST_POWER_CYCLE)
    assert sim.calls("remediation_decision") == []


async def test_unknown_remediation_and_bad_key(sim: TogetherSimulator) -> None:
    async with httpx.AsyncClient(base_url=sim.base_url + "/") as http:
        path = f"compute/clusters/{CLUSTER}/instances/i-x/remediations/nope/approve"
        reply = await http.post(path, headers={"Authorization": "Bearer sim-together-key"})
        assert reply.status_code == 404
        assert reply.json()["error"]["type"] == "invalid_request_error"
        reply = await http.get(f"compute/clusters/{CLUSTER}/instances/-/remediations")
        assert reply.status_code == 401


async def test_requests_and_replies_match_the_derived_spec(
    sim: TogetherSimulator, client: RemediationClient, recorder: RecordingTransport
) -> None:
    for node in (0, 1, 0):
        sim.create_remediation(CLUSTER, NewRemediation(node=node))
    items = await client.list_remediations(CLUSTER, states=PENDING_APPROVAL)
    await client.approve(items[0], comment="ok", mode=RemediationMode.VM_ONLY)
    await client.reject(items[1], comment="not now")
    await client.cancel(items[2])
    await client.get(CLUSTER, items[0].instance_id, items[0].id)
    await client.list_remediations(CLUSTER)
    assert {r.route for r in sim.requests} == {"remediations", "remediation_decision"}
    for request in sim.requests:
        template = DERIVED.match_path(request.path, prefix="/v1")
        DERIVED.validate_request(request.method, template, query=request.query, body=request.body)
    assert {(e.method, e.status) for e in recorder.exchanges} == {("GET", 200), ("POST", 200)}
    for reply in recorder.exchanges:
        template = DERIVED.match_path(reply.path, prefix="/v1")
        DERIVED.validate_response(reply.method, template, reply.status, reply.body)
