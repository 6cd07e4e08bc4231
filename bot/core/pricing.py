"""What a change does to a cluster's price, in words: only from what the provider's plan
says (a price per node), never a guess."""

from __future__ import annotations

from collections.abc import Mapping

from bot.providers.pricing import NodePrice, money


def _nodes(count: int) -> str:
    return "1 more node" if count == 1 else f"{count} more nodes"


def scale_price_line(price: NodePrice | None, additional_nodes: int) -> str | None:
    """The price line of adding nodes, or None when nothing can be said honestly."""
    if price is None or additional_nodes <= 0:
        return None
    if price.billing == "committed":
        term = f" ({price.committed_days} days)" if price.committed_days else ""
        return (
            f"{_nodes(additional_nodes)} on a committed plan{term}: billed by the plan's "
            "terms, no hourly price to show"
        )
    if price.billing != "hourly" or price.unit_price is None or price.currency is None:
        return None
    each = money(price.unit_price, price.currency)
    total = money(price.unit_price * additional_nodes, price.currency)
    return f"≈ +{total}/h: {_nodes(additional_nodes)} at {each}/h each, hourly plan"


def change_price_line(
    price: NodePrice | None, action: str, body: Mapping[str, object]
) -> str | None:
    """The price line of a stored change (only ``scale_cluster`` changes the price)."""
    if action != "scale_cluster":
        return None
    added = body.get("additional_nodes")
    if isinstance(added, bool) or not isinstance(added, int):
        return None
    return scale_price_line(price, added)
