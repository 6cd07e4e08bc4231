"""The spend arithmetic (SPEC §13): intervals cut at bucket boundaries lose and add no
millisecond, costs round per piece within a micro-unit each, months tile time in every zone,
the projection is month-to-date + rate x hours left, and the bands are judged in order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.core.guardrails.budget import band_of, gpus_added
from bot.core.guardrails.checks import ChangeSize
from bot.core.guardrails.guard import with_gpus
from bot.core.policy.spend import Budget, Team, team_problems
from bot.core.spend.book import Scope
from bot.core.spend.months import MonthError, month_at, month_of, parse_month, projected
from bot.core.store.usage import bucket_of, epoch_ms, pieces
from bot.core.store.usage_records import BUCKET, MS_PER_HOUR, cost_micros

ZONES = st.sampled_from(
    ["UTC", "Europe/Berlin", "Asia/Kolkata", "Asia/Kathmandu", "America/St_Johns"]
)
MOMENTS = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1), timezones=st.just(UTC)
)


@given(MOMENTS, st.integers(min_value=1, max_value=3 * 86_400_000))
def test_pieces_add_up_to_the_interval_each_in_one_bucket(start: datetime, ms: int) -> None:
    end = start + timedelta(milliseconds=ms)
    cut = pieces(start, end)
    assert sum(part for _, part in cut) == epoch_ms(end) - epoch_ms(start)
    buckets = [bucket for bucket, _ in cut]
    assert buckets == sorted(set(buckets))
    assert all(
        bucket_of(b) == b and 0 < part <= BUCKET // timedelta(milliseconds=1) for b, part in cut
    )


@given(st.integers(min_value=0, max_value=10**12), st.lists(st.integers(1, 10**8), min_size=1))
def test_costs_round_within_a_micro_unit_per_piece(rate: int, parts: list[int]) -> None:
    whole = cost_micros(rate, sum(parts))
    split = sum(cost_micros(rate, p) for p in parts)
    assert abs(whole - split) <= len(parts)
    assert cost_micros(rate, MS_PER_HOUR) == rate


@given(MOMENTS, ZONES)
def test_months_tile_time_and_start_on_a_bucket(now: datetime, zone: str) -> None:
    month = month_at(now, zone)
    assert month.start <= now < month.end
    following = month_of(month.year + month.month // 12, month.month % 12 + 1, zone)
    assert following.start == month.end
    assert bucket_of(month.start) == month.start  # every zone's offset is whole quarters
    assert (
        month.hours_left(month.start) * 3600
        == Decimal((month.end - month.start) // timedelta(milliseconds=1)) / 1000
    )
    assert month.hours_left(month.end) == 0


@given(
    st.decimals(min_value=0, max_value=10**7, places=2),
    st.decimals(min_value=-100, max_value=10**4, places=2),
    st.decimals(min_value=0, max_value=744, places=3),
)
def test_the_projection_is_spent_plus_rate_times_hours_left(
    spent: Decimal, rate: Decimal, left: Decimal
) -> None:
    assert projected(spent, rate, left) == spent + max(rate, Decimal(0)) * left
    assert projected(spent, rate, left) >= spent


def test_a_month_is_read_as_yyyy_mm_in_its_zone() -> None:
    month = parse_month("2026-12", "Europe/Berlin")
    assert month.start == datetime(2026, 11, 30, 23, 0, tzinfo=UTC)
    assert month.end == datetime(2026, 12, 31, 23, 0, tzinfo=UTC)
    for bad in ("2026-13", "26-12", "2026-1", "december"):
        with pytest.raises(MonthError):
            parse_month(bad, "UTC")


def _scope(**budget: object) -> Scope:
    return Scope("project", "p", ("p",), Budget.model_validate({"monthly_usd": 1000, **budget}))


@pytest.mark.parametrize(
    ("spend", "band"),
    [
        (399, "ok"),
        (400, "warn"),
        (899, "warn"),
        (900, "approval"),
        (999, "approval"),
        (1000, "deny"),
        (5000, "deny"),
    ],
)
def test_the_bands_in_order(spend: int, band: str) -> None:
    scope = _scope(warn_at=[40, 80], approval_at=90, deny_at=100)
    assert band_of(scope, Decimal(spend)) == band


def test_budget_and_team_keys_are_checked() -> None:
    with pytest.raises(ValueError, match="approval_at must be below deny_at"):
        Budget.model_validate({"monthly_usd": 10, "approval_at": 100, "deny_at": 90})
    with pytest.raises(ValueError, match="warn_at lists a percentage twice"):
        Budget.model_validate({"monthly_usd": 10, "warn_at": [50, 50]})
    teams = {"a": Team(projects=["p", "q"]), "b": Team(projects=["q", "zz"])}
    problems = team_problems(teams, ["p", "q"])
    assert "teams.b.projects: 'q' is already in team a (a project belongs to one team)" in problems
    assert any("unknown project 'zz'" in line for line in problems)


def test_a_node_change_counts_its_gpus_per_node() -> None:
    size = with_gpus(ChangeSize(nodes_before=2, nodes_after=3), 16)
    assert (size.gpus_before, size.gpus_after, gpus_added(size)) == (16, 24, 8)
    together = ChangeSize(gpus_before=8, gpus_after=16)
    assert with_gpus(together, 8) == together
