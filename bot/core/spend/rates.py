"""What a cluster costs per hour now, from the policy's price table (a provider without a
price API) or the cluster's plan, and what an amount is in US dollars."""

from __future__ import annotations

from decimal import Decimal

from bot.core.policy import Policy, ProjectCommon
from bot.core.store.usage_records import Observation
from bot.providers.base import ClusterSummary

# The provider-neutral summary carries a cluster's size in its details: Together's
# ``num_gpus``, E2E's ``gpus`` and ``nodes``.
_GPU_DETAILS = ("num_gpus", "gpus")
_NODE_DETAILS = ("nodes",)


def _whole(summary: ClusterSummary, names: tuple[str, ...]) -> int | None:
    for name in names:
        value = summary.details.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def observe(project: str, config: ProjectCommon, summary: ClusterSummary) -> Observation:
    """The cluster as it stands, priced by what the policy and its plan say now."""
    gpus = _whole(summary, _GPU_DETAILS)
    nodes = _whole(summary, _NODE_DETAILS)
    rate: Decimal | None = None
    currency: str | None = None
    as_of: str | None = None
    if config.descriptor.price_table:
        table = config.price_table
        if table is not None and summary.gpu_type in table.per_gpu_hour and gpus is not None:
            rate = table.per_gpu_hour[summary.gpu_type] * gpus
            currency, as_of = table.currency, table.as_of.isoformat()
    else:
        price = summary.node_price
        hourly = price is not None and price.billing == "hourly"
        if price is not None and hourly and price.unit_price is not None and nodes is not None:
            rate, currency = price.unit_price * nodes, price.currency
    return Observation(
        project=project,
        cluster_id=summary.cluster_id,
        provider=summary.provider,
        cluster_name=summary.name,
        gpus=gpus,
        nodes=nodes,
        gpu_type=summary.gpu_type,
        rate=rate,
        currency=currency,
        price_as_of=as_of,
    )


def gpus_of(summary: ClusterSummary) -> int | None:
    """A cluster's GPU count, as its provider tells it."""
    return _whole(summary, _GPU_DETAILS)


def usd(policy: Policy, amount: Decimal, currency: str | None) -> Decimal | None:
    """``amount`` in US dollars by the policy's ``exchange_rates``; None when it cannot
    be said (a currency without a rate)."""
    if currency is None or currency == "USD":
        return amount if currency == "USD" or amount == 0 else None
    rate = policy.exchange_rates.get(currency)
    return None if rate is None else amount * rate
