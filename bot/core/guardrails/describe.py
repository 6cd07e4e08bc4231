"""``/gpu policy``: a project's guardrails in words, for one person (SPEC §8)."""

from __future__ import annotations

from datetime import datetime

from bot.core.guardrails.checks import OLD_PRICES
from bot.core.guardrails.freezes import freezes_soon, when
from bot.core.policy import Policy, Role
from bot.providers.pricing import money


def _approvals(policy: Policy, project: str) -> list[str]:
    risky = sorted(policy.approval_kinds(project))
    if not risky:
        return ["approvals: no change needs one"]
    lines = []
    for kind in risky:
        rule = next((r for r in policy.approvals.rules if r.matches(project, [kind])), None)
        if rule is None:
            lines.append(f"{kind}: 1 approver (default)")
            continue
        who = "approver" if rule.needed == 1 else "approvers"
        pools = [f"on call on {slot.oncall} up to level {slot.max_level}" for slot in rule.oncall]
        pools += [f"group {' or '.join(rule.usergroups)}"] if rule.usergroups else []
        said = f" from {' or '.join(pools)}" if pools else ""
        lines.append(f"{kind}: {rule.needed} {who}{said} (approval rule)")
    free = sorted(policy.catalog.kinds(policy.project(project).provider) - set(risky))
    if free:
        lines.append(f"no approval: {', '.join(free)}")
    return lines


def _limits(policy: Policy, project: str) -> list[str]:
    config = policy.project(project)
    limits = config.limits
    currency = config.price_table.currency if config.price_table else ""
    parts = []
    if limits is not None and limits.max_gpus is not None:
        parts.append(f"at most {limits.max_gpus} GPUs per cluster")
    if limits is not None and limits.max_nodes is not None:
        parts.append(f"at most {limits.max_nodes} nodes per cluster")
    if limits is not None and limits.max_hourly_increase is not None:
        amount = limits.max_hourly_increase
        shown = money(amount, currency) if currency else f"{amount} (in the price's currency)"
        parts.append(f"at most +{shown}/h per change")
    return [f"limits: {'; '.join(parts)}" if parts else "limits: none"]


def _prices(policy: Policy, project: str, now: datetime) -> list[str]:
    config = policy.project(project)
    if not config.descriptor.price_table:
        return ["prices: from each cluster's plan"]
    prices = config.price_table
    if prices is None:
        return ["prices: none in the policy (no price is shown)"]
    old = " — old: over 90 days" if now.date() - prices.as_of > OLD_PRICES else ""
    table = ", ".join(
        f"{gpu} {money(amount, prices.currency)}"
        for gpu, amount in sorted(prices.per_gpu_hour.items())
    )
    return [f"prices of {prices.as_of.isoformat()}{old}: {table} per GPU-hour"]


def _freezes(policy: Policy, project: str, now: datetime) -> list[str]:
    windows = freezes_soon(policy.freezes, project, now)
    if not windows:
        return ["freezes: none now or in the next 7 days"]
    lines = []
    for window in windows:
        kinds = "" if "*" in window.freeze.kinds else f" ({', '.join(window.freeze.kinds)})"
        if window.start <= now:
            lines.append(f"frozen now: {window.freeze.name}{kinds} until {when(window.end)}")
        else:
            lines.append(
                f"freeze {window.freeze.name}{kinds}: {when(window.start)} to {when(window.end)}"
            )
    return lines


def describe_project(policy: Policy, project: str, role: Role, now: datetime) -> list[str]:
    """What the person may do on the project, and its guardrails, one line each."""
    return [
        f"your role: {role}",
        *_approvals(policy, project),
        *_limits(policy, project),
        *_prices(policy, project, now),
        *_freezes(policy, project, now),
    ]
