"""E2E plans over HTTP: the simulator's hourly, committed and plan-less clusters reach the
neutral summary as a node price (or none), from the list and from the detail alike, and
the documented example plan parses the same way."""

from __future__ import annotations

from decimal import Decimal

from bot.core.pricing import scale_price_line
from bot.providers.e2e import E2EClusterDetail, to_summary
from tests.support.e2e_kit import doc_examples, make_adapter, running_simulator


async def test_seeded_plans_reach_the_summary_from_list_and_detail() -> None:
    async with running_simulator() as sim:
        adapter = make_adapter(sim.base_url)
        try:
            listed = {c.cluster_id: c for c in await adapter.list_clusters()}
            details = {
                cid: (await adapter.get_cluster(cid)).summary for cid in ("101", "104", "106")
            }
        finally:
            await adapter.aclose()
    for summaries in (listed, details):
        hourly, none, committed = summaries["101"], summaries["104"], summaries["106"]
        assert hourly.node_price is not None and hourly.node_price.billing == "hourly"
        assert hourly.node_price.unit_price == Decimal("1995.2")
        assert hourly.node_price.currency == "INR"
        assert none.node_price is None and none.billing is None
        assert committed.node_price is not None and committed.node_price.billing == "committed"
        assert committed.node_price.committed_days == 30
    assert scale_price_line(listed["101"].node_price, 2) == (
        "≈ +₹3,990.40/h: 2 more nodes at ₹1,995.20/h each, hourly plan"
    )


def test_documented_detail_plan_parses_to_a_node_price() -> None:
    data = doc_examples()["get_cluster_200"]["body"]["data"]
    summary = to_summary(E2EClusterDetail.model_validate(data), "e2e-delhi")
    assert summary.node_price is not None
    assert (summary.node_price.billing, summary.node_price.unit_price) == (
        "hourly",
        Decimal("1995.2"),
    )
