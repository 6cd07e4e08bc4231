"""A provider-neutral node price read from a provider's plan (E2E's ``sku_details.plan``),
parsed tolerantly: a field that does not parse is unknown, never a guess."""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict

BillingKind = Literal["hourly", "committed", "other"]
CURRENCY_SYMBOLS = {"INR": "₹", "USD": "$"}


def _amount(value: Decimal) -> str:
    """Exact, with thousands separators and at least two decimals (12.3 → 12.30)."""
    exponent = value.normalize().as_tuple().exponent
    places = max(2, -exponent) if isinstance(exponent, int) else 2
    return f"{value:,.{places}f}"


def money(value: Decimal, currency: str) -> str:
    """``₹1,995.20`` for INR, ``$24.60`` for USD, ``24.60 EUR`` for any other currency code
    (``24.60`` for none): the one way every amount is written."""
    symbol = CURRENCY_SYMBOLS.get(currency.upper())
    if symbol is not None:
        return f"{symbol}{_amount(value)}"
    return f"{_amount(value)} {currency}".rstrip()


def _decimal_or_none(value: Any) -> Decimal | None:
    """A non-negative finite amount; a float goes through its shortest repr, so the JSON
    literal 12.3 becomes Decimal("12.3"), not 12.300000000000000710542735760100185871124."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        value = repr(value)
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        return None
    if not amount.is_finite() or amount < 0:
        return None
    return amount


def _days_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    return None


def _text_or_none(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    text = value.strip()
    return text or None


Amount = Annotated[Decimal | None, BeforeValidator(_decimal_or_none)]
Days = Annotated[int | None, BeforeValidator(_days_or_none)]
Text = Annotated[str | None, BeforeValidator(_text_or_none)]


class NodePrice(BaseModel):
    """What one node of a cluster costs under its plan, as far as the provider says."""

    model_config = ConfigDict(frozen=True)

    billing: BillingKind
    unit_price: Amount = None
    currency: Text = None
    committed_days: Days = None


def _billing_kind(sku_type: str | None, committed_days: int | None) -> BillingKind:
    kind = (sku_type or "").lower()
    if kind == "committed" or (committed_days or 0) > 0:
        return "committed"
    if kind == "hourly":
        return "hourly"
    return "other"


def e2e_node_price(plan: Mapping[str, Any] | None) -> NodePrice | None:
    """The node price of an E2E ``sku_details.plan`` object (the SKU is one node:
    ``specs.no_of_nodes`` is 1), or None when there is no plan."""
    if not isinstance(plan, Mapping):
        return None
    committed_days = _days_or_none(plan.get("committed_days"))
    return NodePrice(
        billing=_billing_kind(_text_or_none(plan.get("sku_type")), committed_days),
        unit_price=plan.get("unit_price"),
        currency=plan.get("currency"),
        committed_days=committed_days,
    )
