"""E2E Networks TIR training clusters: the provider-neutral summary of a list item or detail."""

from __future__ import annotations

from bot.providers.base import (
    ClusterSummary,
    Fact,
    count_text,
)
from bot.providers.e2e.models import (
    MEMORY_PATTERN,
    PROVIDER,
    STEADY_STATUSES,
    E2ECluster,
    E2EClusterDetail,
    E2EImageVersion,
    E2ESkuPlan,
)
from bot.providers.e2e.pricing import e2e_node_price
from bot.providers.pricing import money

# -- summaries ------------------------------------------------------------------------------


def is_steady(status: str) -> bool:
    return status.strip().lower() in STEADY_STATUSES


def _times(value: int | None, nodes: int | None) -> int | None:
    if value is None:
        return None
    return value * nodes if nodes is not None else value


def _memory_times(memory: str | None, nodes: int | None) -> str | None:
    if memory is None or nodes is None:
        return memory
    match = MEMORY_PATTERN.match(memory)
    if match is None:
        return memory
    number, unit = match.groups()
    total = float(number) * nodes
    shown = f"{total:g}" if not total.is_integer() else str(int(total))
    return f"{shown} {unit}" if unit else shown


def _image_text(image: E2EImageVersion | None) -> str | None:
    if image is None:
        return None
    words = " ".join(part for part in (image.name, image.version) if part)
    if image.id is None:
        return words or None
    return f"{words} (id {image.id})" if words else f"id {image.id}"


def _billing_text(plan: E2ESkuPlan | None, nodes: int | None) -> str | None:
    """``hourly · ₹1,995.20/h per node · ₹3,990.40/h for 2 nodes``: E2E prices a node, so
    the line says so and, for more than one, what the cluster costs."""
    if plan is None:
        return None
    kind = plan.sku_type or "plan"
    if plan.committed_days:
        kind = f"{kind} {plan.committed_days} days"
    if plan.unit_price is None:
        return kind
    per = "/h" if (plan.sku_type or "").lower() == "hourly" else ""
    price = e2e_node_price(plan.model_dump())
    if price is None or price.unit_price is None:
        return kind
    currency = plan.currency or ""
    text = f"{kind} · {money(price.unit_price, currency)}{per} per node"
    if nodes is not None and nodes > 1:
        text += f" · {money(price.unit_price * nodes, currency)}{per} for {nodes} nodes"
    return text


def to_summary(cluster: E2ECluster, project: str, *, location: str | None = None) -> ClusterSummary:
    """The neutral summary of a list item or a detail (both shapes' quirks absorbed)."""
    nodes = cluster.no_of_nodes
    specs, plan = cluster.specs, cluster.plan
    if isinstance(cluster, E2EClusterDetail):
        gpus, cpus, memory = cluster.total_gpu, cluster.total_cpu, cluster.total_memory
    else:
        gpus = _times(cluster.no_of_gpu, nodes)
        cpus = _times(cluster.no_of_cpu, nodes)
        memory = _memory_times(cluster.node_memory, nodes)
    region = location or (plan.location if plan else None)
    billing = _billing_text(plan, nodes)
    gpu_type = specs.gpu_card_type if specs else None
    image = _image_text(cluster.image_version)
    sku = specs.name if specs else None
    facts = (
        Fact(
            label="Nodes / GPUs",
            value=f"{nodes_text(nodes)} · {count_text(gpus)} x {gpu_type or 'GPU'}",
        ),
        Fact(label="CPUs / memory", value=f"{count_text(cpus)} CPUs · {memory or '—'}"),
        Fact(label="Image", value=image or "—"),
        Fact(label="SKU", value=sku or "—"),
        Fact(label="Region", value=region or "—"),
        Fact(label="Billing", value=billing or "—"),
        *(_access_facts(cluster) if isinstance(cluster, E2EClusterDetail) else ()),
    )
    return ClusterSummary(
        provider=PROVIDER,
        project=project,
        cluster_id=str(cluster.id),
        name=cluster.name,
        status=cluster.status,
        steady=is_steady(cluster.status),
        gpu_type=gpu_type,
        region=region,
        billing=billing,
        node_price=e2e_node_price(plan.model_dump() if plan else None),
        size=nodes_text(nodes) if nodes is not None else None,
        facts=facts,
        details={
            "nodes": nodes,
            "gpus": gpus,
            "cpus": cpus,
            "memory": memory,
            "image": image,
            "sku": sku,
        },
    )


def _access_facts(cluster: E2EClusterDetail) -> tuple[Fact, ...]:
    """The public IP (a reserved one when attached) and the security groups, as the detail
    tells them; nothing for what it does not tell."""
    facts: list[Fact] = []
    reserved = cluster.reserve_ip
    address = cluster.ssh_public_ip or (reserved.ip_address if reserved else None)
    if address:
        held = f" (reserved IP {reserved.id})" if reserved and reserved.id is not None else ""
        facts.append(Fact(label="Public IP", value=f"{address}{held}"))
    elif cluster.has_floating_ip is False:
        facts.append(Fact(label="Public IP", value="none attached"))
    groups = [_group_text(g.name, g.id) for g in cluster.security_groups]
    if groups:
        facts.append(Fact(label="Security groups", value=", ".join(groups)))
    return tuple(facts)


def _group_text(name: str | None, group_id: int | None) -> str:
    if name and group_id is not None:
        return f"{name} ({group_id})"
    return name or str(group_id)


def nodes_text(nodes: int | None) -> str:
    """``1 node``, ``3 nodes``, ``— nodes``."""
    return f"{count_text(nodes)} node" + ("" if nodes == 1 else "s")
