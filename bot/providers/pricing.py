"""A provider-neutral node price, parsed tolerantly from what a provider's plan says (each
provider reads its own plan: E2E's in ``bot/providers/e2e/pricing.py``): a field that does
not parse is unknown, never a guess."""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from typing import Annotated, Literal

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


def _decimal_or_none(value: object) -> Decimal | None:
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


def _days_or_none(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    return None


def _text_or_none(value: object) -> str | None:
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
