"""The policy holder: ``swap`` puts a policy in force for every reader at once and gives
back the one it replaced; a policy validated against another catalog is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.policy import ForeignPolicy, PolicyHolder, parse_policy
from bot.local.demo.stack import DEMO_POLICY
from bot.providers.catalog import Catalog
from tests.support.catalog import CATALOG

PATH = Path("policy.yml")


def test_swap_puts_the_new_policy_in_force_and_returns_the_old() -> None:
    first = parse_policy(DEMO_POLICY, PATH, CATALOG)
    second = parse_policy(
        DEMO_POLICY.replace("expire_after_minutes: 30", "expire_after_minutes: 5"), PATH, CATALOG
    )
    holder = PolicyHolder(first)
    assert holder.catalog is CATALOG
    assert holder.swap(second) is first
    assert holder.current is second and holder.current.approvals.expire_after_minutes == 5


def test_a_policy_of_another_catalog_is_refused() -> None:
    holder = PolicyHolder(parse_policy(DEMO_POLICY, PATH, CATALOG))
    other = Catalog.of(CATALOG.descriptors)  # the same providers, another value
    foreign = parse_policy(DEMO_POLICY, PATH, other)
    in_force = holder.current
    with pytest.raises(ForeignPolicy):
        holder.swap(foreign)
    assert holder.current is in_force
