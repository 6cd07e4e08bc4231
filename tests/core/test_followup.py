"""After a change, on the core harness (SPEC §4.3.5): the summary follows the cluster's
status until it is steady, once across a restart and across two replicas; not at all with
polling off; it gives up after repeated provider failures or at its deadline. And the
metrics of decisions and outcomes."""

from __future__ import annotations

from bot.core.requests.followup import poll_lease
from bot.core.store import RequestState as S
from bot.metrics import REGISTRY
from bot.providers.errors import ProviderServerError
from tests.core.conftest import CoreFactory
from tests.support.core_harness import BOB, CAROL, DAVE, Core

SCALE_UP = {"num_gpus": "16"}  # tc-h200-ondemand 8 → 16: needs no approval
CLUSTER = "tc-h200-ondemand"


def statuses(core: Core, request_id: str) -> list[str]:
    return [t.summary.status for t in core.notifier.of(request_id, "status") if t.summary]


async def provisioning(make_core: CoreFactory, **options: object) -> tuple[Core, str]:
    """A scale-up whose cluster is still provisioning when the change is done."""
    core = await make_core(poll_seconds=0.01, **options)
    core.together.clusters[CLUSTER]["status"] = "WaitingForDataPlaneNodes"
    opened = await core.open(DAVE, "together-prod", CLUSTER, "update", SCALE_UP)
    return core, opened.id


async def shown(core: Core, request_id: str, count: int) -> None:
    await core.notifier.wait_for(lambda: len(statuses(core, request_id)) >= count)


async def test_the_summary_follows_the_cluster_until_it_is_steady(
    make_core: CoreFactory, database_url: str
) -> None:
    core, request_id = await provisioning(make_core, database_url=database_url)
    record = await core.record(request_id)
    assert record.state is S.SUCCEEDED and record.follow_until is not None
    await shown(core, request_id, 1)
    core.together.clusters[CLUSTER]["status"] = "InstallingDrivers"
    await shown(core, request_id, 2)
    core.together.clusters[CLUSTER]["status"] = "Ready"
    await core.notifier.wait_for(lambda: bool(core.notifier.notes(request_id)))
    await core.workflow.drain()  # the poller has stopped
    assert statuses(core, request_id) == ["WaitingForDataPlaneNodes", "InstallingDrivers", "Ready"]
    assert core.notifier.notes(request_id) == ["infer-h200 is Ready."]
    assert core.notifier.of(request_id, "follow_up_note")[0].tone == "good"
    assert (await core.record(request_id)).follow_until is None
    audited = [o for _, e, o in await core.trail(request_id) if e == "status"]
    assert audited == ["WaitingForDataPlaneNodes", "InstallingDrivers", "Ready"]


async def test_no_follow_up_when_polling_is_off(core: Core) -> None:
    core.together.clusters[CLUSTER]["status"] = "WaitingForDataPlaneNodes"
    opened = await core.open(DAVE, "together-prod", CLUSTER, "update", SCALE_UP)
    await core.workflow.drain()
    record = await core.record(opened.id)
    assert record.state is S.SUCCEEDED and record.follow_until is None
    assert len(core.together.script.of("get_cluster")) == 1  # the one before the preview
    assert "status" not in core.notifier.methods(opened.id)
    assert core.notifier.notes(opened.id) == []


async def test_a_follow_up_resumes_after_a_restart_and_ends_once(
    make_core: CoreFactory, database_url: str
) -> None:
    core, request_id = await provisioning(make_core, database_url=database_url)
    await shown(core, request_id, 1)
    await core.workflow.close()  # stopped before the cluster is steady
    assert (await core.record(request_id)).follow_until is not None
    after = await core.replica("core-2")
    assert await after.follow_up.resume() == 1
    core.together.clusters[CLUSTER]["status"] = "Ready"
    await core.notifier.wait_for(lambda: bool(core.notifier.notes(request_id)))
    await after.drain()
    assert core.notifier.notes(request_id) == ["infer-h200 is Ready."]
    assert (await core.record(request_id)).follow_until is None
    assert await after.follow_up.resume() == 0  # ended: nothing to resume


async def test_two_replicas_follow_a_change_once(make_core: CoreFactory, database_url: str) -> None:
    core, request_id = await provisioning(make_core, database_url=database_url)
    await shown(core, request_id, 1)
    replica = await core.replica("core-b")
    assert await replica.follow_up.resume() == 1
    await replica.drain()  # it did not get the poll lease: it stopped
    lease = await core.store.get_lease(poll_lease(request_id))
    assert lease is not None and lease.holder == "core-a"
    core.together.clusters[CLUSTER]["status"] = "Ready"
    await core.notifier.wait_for(lambda: bool(core.notifier.notes(request_id)))
    await core.workflow.drain()
    assert core.notifier.notes(request_id) == ["infer-h200 is Ready."]
    assert await replica.follow_up.resume() == 0


async def test_a_follow_up_gives_up_after_repeated_provider_failures(
    make_core: CoreFactory,
) -> None:
    core, request_id = await provisioning(make_core)
    await shown(core, request_id, 1)
    core.together.script.fail(
        "get_cluster", ProviderServerError("down", provider="together"), times=5
    )
    await core.notifier.wait_for(lambda: bool(core.notifier.notes(request_id)))
    await core.workflow.drain()
    [note] = core.notifier.notes(request_id)
    assert note.startswith(f"Stopped following {CLUSTER}: together: down")
    assert (await core.record(request_id)).follow_until is None


async def test_a_follow_up_stops_at_its_deadline(make_core: CoreFactory) -> None:
    core, request_id = await provisioning(make_core, followup_minutes=30.0)
    await shown(core, request_id, 1)
    core.clock.advance(minutes=31)
    await core.notifier.wait_for(lambda: bool(core.notifier.notes(request_id)))
    await core.workflow.drain()
    assert core.notifier.notes(request_id) == [
        f"{CLUSTER} is still WaitingForDataPlaneNodes after 30 minutes; stopped following."
    ]


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_metrics_count_approval_decisions_expiries_and_outcomes(core: Core) -> None:
    await core.workflow.refresh_pending_gauge()
    decisions = "gpuops_approval_decisions_total"
    outcomes = "gpuops_change_requests_total"
    counted = [
        (decisions, {"decision": d}) for d in ("approved", "denied", "expired", "refused")
    ] + [
        (outcomes, {"provider": "e2e", "outcome": o})
        for o in ("succeeded", "failed", "denied", "expired")
    ]
    before = [sample(name, **labels) for name, labels in counted]
    approved = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"})
    denied = await core.open(DAVE, "e2e-delhi", "103", "restart_workers")
    await core.open(DAVE, "e2e-delhi", "104", "restart_cluster")  # expires
    failed = await core.open(DAVE, "e2e-delhi", "105", "restart_workers")
    assert sample("gpuops_approvals_pending") == 4
    await core.approve(BOB, approved.id)
    await core.deny(BOB, denied.id)
    core.e2e.script.fail("apply", ProviderServerError("bad", provider="e2e", status=400))
    await core.approve(DAVE, failed.id)  # refused: his own
    await core.approve(BOB, failed.id)
    await core.approve(CAROL, failed.id)  # too late: told so, not counted as refused
    core.clock.advance(hours=1)
    assert await core.workflow.expire_due() == 1
    after = [sample(name, **labels) for name, labels in counted]
    deltas = {
        f"{name}:{next(iter(labels.values())) if name == decisions else labels['outcome']}": a - b
        for (name, labels), a, b in zip(counted, after, before, strict=True)
    }
    assert deltas == {
        f"{decisions}:approved": 2,  # the 400 was approved, then failed
        f"{decisions}:denied": 1,
        f"{decisions}:expired": 1,
        f"{decisions}:refused": 1,
        f"{outcomes}:succeeded": 1,
        f"{outcomes}:failed": 1,
        f"{outcomes}:denied": 1,
        f"{outcomes}:expired": 1,
    }
    assert sample("gpuops_approvals_pending") == 0
