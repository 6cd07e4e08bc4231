"""The core harness itself: scripted calls play in order and are recorded, a cluster of
another Together project is not this project's, the notifier records a scripted failure,
each core has a store of its own, and the rules are the descriptors' own adapters, which
never reach for HTTP."""

from __future__ import annotations

import asyncio

import pytest

from bot.core.ask.change import ChangeAsk
from bot.core.notifier import NotDelivered
from bot.providers.e2e import E2EAdapter
from bot.providers.e2e.descriptor import DESCRIPTOR as E2E
from bot.providers.errors import ProviderNotFound, ProviderServerError
from bot.providers.together import TogetherAdapter
from bot.providers.together.descriptor import DESCRIPTOR as TOGETHER
from tests.core.conftest import CoreFactory
from tests.support.core_harness import DAVE, Core
from tests.support.core_script import Call, _NoClient


async def test_scripted_steps_play_in_order_then_the_cluster_answers(core: Core) -> None:
    script = core.e2e.script
    before = await core.e2e.get_cluster("101")
    script.fail("get_cluster", ProviderServerError("down", provider="e2e"))
    script.answer("get_cluster", before.model_copy(update={"current": {"status": "Odd"}}))
    with pytest.raises(ProviderServerError):
        await core.e2e.get_cluster("101")
    assert (await core.e2e.get_cluster("101")).current == {"status": "Odd"}
    assert (await core.e2e.get_cluster("101")) == before
    assert script.of("get_cluster") == [Call("get_cluster", "101")] * 4


async def test_a_hung_call_waits_for_its_release(core: Core) -> None:
    hang = core.e2e.script.hang("list_clusters")
    listing = asyncio.create_task(core.e2e.list_clusters())
    await hang.entered.wait()
    assert not listing.done()
    hang.release()
    assert [s.cluster_id for s in await listing] == ["101", "102", "103", "104", "105", "106"]


async def test_another_projects_cluster_and_an_unknown_one_are_not_found(core: Core) -> None:
    with pytest.raises(ProviderNotFound):
        await core.together.get_cluster("tc-other-proj")
    with pytest.raises(ProviderNotFound):
        await core.e2e.get_cluster("999")
    listed = [s.cluster_id for s in await core.together.list_clusters()]
    assert "tc-other-proj" not in listed and "tc-h100-reserved" in listed
    assert "not found" in await core.answer(DAVE, "show together-prod tc-other-proj")


async def test_the_notifier_records_a_failed_call_and_raises_it(core: Core) -> None:
    core.notifier.fail("request_opened", NotDelivered("gone", "Gone."))
    await core.workflow.request_change(
        ChangeAsk(
            user=DAVE,
            channel="C0INCIDENT",
            project="e2e-delhi",
            cluster_id="101",
            action="restart_workers",
            inputs={},
            reason=None,
        )
    )
    first = core.notifier.told[0]
    assert (first.method, first.failed) == ("request_opened", True)
    assert not any(t.failed for t in core.notifier.told[1:])


async def test_each_core_has_a_store_of_its_own(make_core: CoreFactory) -> None:
    one, two = await make_core(), await make_core()
    await one.open(DAVE, "e2e-delhi", "101", "restart_workers")
    assert len(await one.store.list_requests()) == 1
    assert await two.store.list_requests() == []


async def test_the_rules_are_the_descriptors_adapter_that_reaches_no_http(core: Core) -> None:
    """Each project's rules are the adapter its provider's descriptor builds, on a transport
    that fails any request: the fleet answers every call instead."""
    rules = core.e2e.rules
    assert isinstance(rules, E2EAdapter) and isinstance(core.together.rules, TogetherAdapter)
    assert (core.e2e.descriptor, core.together.descriptor) == (E2E, TOGETHER)
    assert isinstance(rules.client.transport, _NoClient)
    with pytest.raises(AssertionError, match="no provider client"):
        await rules.list_clusters()
