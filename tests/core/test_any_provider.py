"""The core harness for a provider outside gpuops: Lumen (tests/thirdprovider), its scripted
adapter built from its descriptor like the built-ins'. A shrink waits for a second person
and runs once; a grow runs at once; Lumen's own rule refuses a size; a scripted provider
failure ends the request as it would for Together or E2E."""

from __future__ import annotations

import pytest

from bot.core.store import RequestState as S
from bot.providers.catalog import Catalog
from bot.providers.errors import ProviderServerError
from bot.providers.installed import BUILT_IN
from tests.core.conftest import CoreFactory
from tests.support.core_fleet import FLEETS
from tests.support.core_harness import BOB, DAVE, Core
from tests.thirdprovider.adapter import LumenAdapter
from tests.thirdprovider.descriptor import DESCRIPTOR as LUMEN
from tests.thirdprovider.fleet import lumen_fleets

WITH_LUMEN = Catalog.of([*BUILT_IN, LUMEN])
POLICY = """\
projects:
  lumen-lab:
    provider: lumen
    region: north
    notify_channel: C0GPUAUDIT
grants:
  - users: [U04DAVE]
    projects: [lumen-lab]
    role: operator
  - users: [U02BOB]
    projects: ["*"]
    role: approver
"""


@pytest.fixture
async def lumen(make_core: CoreFactory, database_url: str) -> Core:
    """A core whose one project is at Lumen, on SQLite and PostgreSQL."""
    return await make_core(
        policy_yaml=POLICY,
        database_url=database_url,
        catalog=WITH_LUMEN,
        fleets={**FLEETS, "lumen": lumen_fleets},
    )


async def test_a_shrink_waits_for_a_second_person_then_runs_once(lumen: Core) -> None:
    adapter = lumen.provider("lumen-lab")
    assert isinstance(adapter.rules, LumenAdapter) and adapter.descriptor is LUMEN
    opened = await lumen.open(DAVE, "lumen-lab", "lc-1", "resize", {"gpus": "4"}, reason="q4")
    assert "is waiting for approval in the thread" in opened.text
    assert opened.text.endswith("in the thread: gpus 8 → 4")
    assert adapter.script.of("apply") == []

    assert await lumen.approve(BOB, opened.id) is None
    [call] = adapter.script.of("apply")
    assert (call.cluster_id, call.action, call.body) == ("lc-1", "resize", {"gpus": 4})
    assert adapter.clusters["lc-1"].gpus == 4
    record = await lumen.record(opened.id)
    assert record.state is S.SUCCEEDED and record.decided_by == BOB
    assert record.provider == "lumen" and record.result_message == "Lumen is resizing"
    assert await lumen.trail(opened.id) == [
        (DAVE, "requested", "pending"),
        (BOB, "approved", "approved"),
        (BOB, "executing", None),
        (DAVE, "result", "succeeded"),
    ]
    [result] = lumen.notifier.of(opened.id, "result")
    assert result.summary is not None and result.summary.size == "4 GPUs"


async def test_a_grow_runs_at_once_and_a_size_lumen_refuses_opens_nothing(lumen: Core) -> None:
    adapter = lumen.provider("lumen-lab")
    opened = await lumen.open(DAVE, "lumen-lab", "lc-2", "resize", {"gpus": "8"})
    assert "ran — see the thread for the result (done: Lumen is resizing)" in opened.text
    record = await lumen.record(opened.id)
    assert record.state is S.SUCCEEDED and record.needs_approval is False
    assert adapter.clusters["lc-2"].gpus == 8

    refused = await lumen.answer(DAVE, "resize lumen-lab lc-1 gpus=6")
    assert "gpus must be a multiple of 4" in refused
    assert len(adapter.script.of("apply")) == 1
    assert len(await lumen.store.list_requests()) == 1


async def test_a_failure_that_changed_nothing_ends_failed_never_retried(lumen: Core) -> None:
    adapter = lumen.provider("lumen-lab")
    opened = await lumen.open(DAVE, "lumen-lab", "lc-1", "resize", {"gpus": "4"})
    adapter.script.fail("apply", ProviderServerError("down", provider="lumen", status=503))
    assert await lumen.approve(BOB, opened.id) is None
    record = await lumen.record(opened.id)
    assert record.state is S.FAILED and record.result_message is not None
    assert "Nothing was changed." in record.result_message
    assert len(adapter.script.of("apply")) == 1
    assert adapter.clusters["lc-1"].gpus == 8
