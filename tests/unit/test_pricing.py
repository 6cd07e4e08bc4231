"""The price line of a scale_cluster: exact Decimal arithmetic from the provider's plan,
a committed plan said in words, and nothing at all when there is no plan or no price."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bot.core.pricing import change_price_line, scale_price_line
from bot.providers.e2e.models import E2EClusterDetail
from bot.providers.e2e.pricing import e2e_node_price
from bot.providers.e2e.summary import to_summary
from bot.providers.pricing import NodePrice, money

HOURLY_INR = {"sku_type": "hourly", "committed_days": 0, "unit_price": 12.3, "currency": "INR"}


def test_hourly_inr_plan_gives_the_issue_line() -> None:
    line = scale_price_line(e2e_node_price(HOURLY_INR), 2)
    assert line == "≈ +₹24.60/h: 2 more nodes at ₹12.30/h each, hourly plan"


def test_one_node_and_a_large_price_read_naturally() -> None:
    price = e2e_node_price({**HOURLY_INR, "unit_price": 1995.2})
    assert (
        scale_price_line(price, 1) == "≈ +₹1,995.20/h: 1 more node at ₹1,995.20/h each, hourly plan"
    )


def test_the_summary_billing_line_writes_money_as_the_price_line_does() -> None:
    plan = {**HOURLY_INR, "unit_price": 1995.2}
    cluster = E2EClusterDetail.model_validate(
        {
            "id": 101,
            "name": "a",
            "status": "Running",
            "no_of_nodes": 2,
            "sku_details": {"plan": plan},
        }
    )
    billing = to_summary(cluster, "e2e-delhi").billing
    line = scale_price_line(e2e_node_price(plan), 1)
    assert (
        billing == "hourly · ₹1,995.20/h per node · ₹3,990.40/h for 2 nodes"
        and line is not None
        and "₹1,995.20/h each" in line
    )
    assert "1995.2" not in f"{billing} {line}" and "INR" not in f"{billing} {line}"


def test_other_currencies_are_shown_by_code() -> None:
    price = e2e_node_price({**HOURLY_INR, "currency": "SGD", "unit_price": "2.5"})
    assert (
        scale_price_line(price, 3) == "≈ +7.50 SGD/h: 3 more nodes at 2.50 SGD/h each, hourly plan"
    )


def test_committed_plan_says_so_instead_of_a_number() -> None:
    price = e2e_node_price(
        {"sku_type": "committed", "committed_days": 30, "unit_price": 850000, "currency": "INR"}
    )
    line = scale_price_line(price, 2)
    assert line is not None
    assert "committed plan (30 days)" in line and "2 more nodes" in line
    assert "₹" not in line and "850" not in line


def test_committed_days_alone_mark_a_committed_plan() -> None:
    price = e2e_node_price({"committed_days": 90, "unit_price": 5000, "currency": "INR"})
    assert price is not None and price.billing == "committed"


def test_no_plan_no_line() -> None:
    assert e2e_node_price(None) is None
    assert e2e_node_price("not an object") is None  # type: ignore[arg-type]
    assert scale_price_line(None, 2) is None


def test_missing_or_unreadable_price_or_currency_gives_no_line() -> None:
    for broken in (
        {**HOURLY_INR, "unit_price": None},
        {**HOURLY_INR, "unit_price": "twelve"},
        {**HOURLY_INR, "unit_price": -1},
        {**HOURLY_INR, "unit_price": float("nan")},
        {**HOURLY_INR, "unit_price": True},
        {**HOURLY_INR, "currency": ""},
        {**HOURLY_INR, "currency": None},
        {**HOURLY_INR, "sku_type": "spot"},
        {**HOURLY_INR, "sku_type": None},
    ):
        assert scale_price_line(e2e_node_price(broken), 2) is None, broken


def test_only_scale_cluster_changes_the_price() -> None:
    price = e2e_node_price(HOURLY_INR)
    assert change_price_line(price, "scale_cluster", {"additional_nodes": 2}) is not None
    assert change_price_line(price, "restart_cluster", {}) is None
    assert change_price_line(price, "scale_cluster", {"additional_nodes": "2"}) is None
    assert change_price_line(price, "scale_cluster", {"additional_nodes": 0}) is None


def test_float_prices_keep_their_literal_value() -> None:
    price = e2e_node_price({**HOURLY_INR, "unit_price": 0.1})
    assert price is not None and price.unit_price == Decimal("0.1")
    # 3 x 0.1 is 0.30000000000000004 in floats; the line says 0.30
    assert scale_price_line(price, 3) == "≈ +₹0.30/h: 3 more nodes at ₹0.10/h each, hourly plan"


@given(
    cents=st.integers(min_value=0, max_value=10**9),
    places=st.integers(min_value=0, max_value=4),
    nodes=st.integers(min_value=1, max_value=500),
)
def test_total_is_exactly_nodes_times_the_unit_price(cents: int, places: int, nodes: int) -> None:
    unit = Decimal(cents).scaleb(-places)
    price = NodePrice(billing="hourly", unit_price=unit, currency="INR")
    line = scale_price_line(price, nodes)
    assert line is not None
    total_text = line.split("/h")[0].removeprefix("≈ +₹").replace(",", "")
    each_text = line.split(" at ₹")[1].split("/h")[0].replace(",", "")
    assert Decimal(total_text) == unit * nodes
    assert Decimal(each_text) == unit


@given(
    st.one_of(
        st.none(), st.text(), st.floats(), st.integers(), st.booleans(), st.lists(st.integers())
    )
)
def test_any_unit_price_value_parses_or_is_unknown(value: Any) -> None:
    price = e2e_node_price({**HOURLY_INR, "unit_price": value})
    assert price is not None
    assert price.unit_price is None or (price.unit_price.is_finite() and price.unit_price >= 0)


def test_money_keeps_extra_precision() -> None:
    assert money(Decimal("12.345"), "INR") == "₹12.345"
    assert money(Decimal("1234567"), "EUR") == "1,234,567.00 EUR"
