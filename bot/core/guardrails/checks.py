"""What a change does to a cluster's size and price, and whether the project's limits allow
it: pure functions of the policy, the fetched cluster and the plan."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

from pydantic import BaseModel, ConfigDict

from bot.core.policy.guardrails import Limits, Prices
from bot.core.pricing import scale_price_line
from bot.providers.base import ChangePlan, ClusterState
from bot.providers.descriptor import ProviderDescriptor
from bot.providers.pricing import NodePrice, money

OLD_PRICES = timedelta(days=90)


class ChangeSize(BaseModel):
    """A cluster's size before and after a change, and the price of one hour of the
    difference where it is known; kept with the request for the checks before sending."""

    model_config = ConfigDict(frozen=True)

    gpu_type: str | None = None
    gpus_before: int | None = None
    gpus_after: int | None = None
    nodes_before: int | None = None
    nodes_after: int | None = None
    hourly: Decimal | None = None  # signed: what an hour costs more (or less) after it
    currency: str | None = None
    price_line: str | None = None

    def adds_capacity(self) -> bool:
        gpus = (self.gpus_after or 0) > (self.gpus_before or 0)
        nodes = (self.nodes_after or 0) > (self.nodes_before or 0)
        return gpus or nodes


def size_of(
    provider: ProviderDescriptor,
    state: ClusterState,
    plan: ChangePlan,
    prices: Prices | None,
    today: date,
) -> ChangeSize:
    """The size (and price) change of a planned change on a fetched cluster: the provider
    counts the size; the price is the plan's node price (a provider with a price API) or
    the policy's table per GPU-hour (one without)."""
    counted = provider.size(state, plan)
    size = ChangeSize(gpu_type=state.summary.gpu_type, **counted.model_dump())
    if provider.price_table:
        return _table_priced(size, prices, today)
    return _node_priced(size, plan.node_price)


def _node_priced(size: ChangeSize, price: NodePrice | None) -> ChangeSize:
    added = (size.nodes_after or 0) - (size.nodes_before or 0)
    hourly = None
    if added and price and price.billing == "hourly" and price.unit_price is not None:
        hourly = price.unit_price * added
    return size.model_copy(
        update={
            "hourly": hourly,
            "currency": price.currency if price else None,
            "price_line": scale_price_line(price, max(added, 0)),
        }
    )


def _table_priced(size: ChangeSize, prices: Prices | None, today: date) -> ChangeSize:
    if size.gpus_before is None or size.gpus_after is None or size.gpus_after == size.gpus_before:
        return size
    if prices is None or size.gpu_type is None or size.gpu_type not in prices.per_gpu_hour:
        return size
    delta = size.gpus_after - size.gpus_before
    each = prices.per_gpu_hour[size.gpu_type]
    hourly = each * delta
    sign = "+" if delta > 0 else "-"
    times = "\N{MULTIPLICATION SIGN}"
    line = (
        f"≈ {sign}{money(abs(hourly), prices.currency)}/h: {abs(delta)} {times} {size.gpu_type} "
        f"at {money(each, prices.currency)}, prices of {prices.as_of.isoformat()}"
    )
    if today - prices.as_of > OLD_PRICES:
        line += " (old: over 90 days)"
    return size.model_copy(
        update={"hourly": hourly, "currency": prices.currency, "price_line": line}
    )


def limit_refusal(project: str, limits: Limits | None, size: ChangeSize) -> str | None:
    """Why the project's limits forbid this change, or None when they allow it."""
    if limits is None:
        return None
    if _over(limits.max_gpus, size.gpus_before, size.gpus_after):
        return (
            f"num_gpus {size.gpus_after} is over {project}'s limit of {limits.max_gpus} GPUs "
            "per cluster"
        )
    if _over(limits.max_nodes, size.nodes_before, size.nodes_after):
        return (
            f"{size.nodes_after} nodes is over {project}'s limit of {limits.max_nodes} nodes "
            "per cluster"
        )
    return _hourly_refusal(project, limits.max_hourly_increase, size)


def _over(limit: int | None, before: int | None, after: int | None) -> bool:
    """Past the limit, and raised by this change (one that lowers or keeps a size already
    past it is not refused)."""
    if limit is None or after is None or after <= limit:
        return False
    return before is None or after > before


def _hourly_refusal(project: str, ceiling: Decimal | None, size: ChangeSize) -> str | None:
    if ceiling is None or not size.adds_capacity():
        return None
    if size.hourly is None or size.currency is None:
        what = size.gpu_type or "this cluster"
        return (
            f"no price for GPU type {what}; {project}'s limit on the hourly increase "
            "cannot be checked"
        )
    if size.hourly > ceiling:
        return (
            f"≈ +{money(size.hourly, size.currency)}/h is over {project}'s limit of "
            f"+{money(ceiling, size.currency)}/h per change"
        )
    return None
