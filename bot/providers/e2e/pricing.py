"""E2E's node price: its ``sku_details.plan`` object read as a provider-neutral NodePrice."""

from __future__ import annotations

from collections.abc import Mapping

from bot.providers.pricing import BillingKind, NodePrice


def _billing_kind(sku_type: object, committed_days: int | None) -> BillingKind:
    kind = sku_type.strip().lower() if isinstance(sku_type, str) else ""
    if kind == "committed" or (committed_days or 0) > 0:
        return "committed"
    if kind == "hourly":
        return "hourly"
    return "other"


def e2e_node_price(plan: Mapping[str, object] | None) -> NodePrice | None:
    """The node price of an E2E ``sku_details.plan`` object (the SKU is one node:
    ``specs.no_of_nodes`` is 1), or None when there is no plan."""
    if not isinstance(plan, Mapping):
        return None
    parsed = NodePrice(
        billing="other",
        unit_price=plan.get("unit_price"),
        currency=plan.get("currency"),
        committed_days=plan.get("committed_days"),
    )
    billing = _billing_kind(plan.get("sku_type"), parsed.committed_days)
    return parsed.model_copy(update={"billing": billing})
