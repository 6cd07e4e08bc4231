"""The staged plan (SPEC §14, bot.core.staged.plan): steps from the size now to the target
by ``step=``, up and down, each with its price per hour; durations; what cannot be planned."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from bot.core.policy import PolicyError
from bot.core.staged.plan import (
    StagedPlan,
    Staging,
    StagingError,
    build_plan,
    duration_text,
    parse_duration,
    parse_step,
    sizes_between,
)
from bot.providers.stepping import Stepping
from tests.support.catalog import load_policy

GPUS = Stepping(
    action="update",
    fields=("num_gpus", "num_preemptible_gpus"),
    unit="GPUs",
    multiple=8,
)
NODES = Stepping(action="scale_cluster", fields=("additional_nodes",), unit="nodes", additive=True)
TEN = timedelta(minutes=10)
HALF = timedelta(minutes=30)


def test_sizes_up_down_and_a_short_last_step() -> None:
    assert sizes_between(64, 256, 32) == [96, 128, 160, 192, 224, 256]
    assert sizes_between(256, 64, 64) == [192, 128, 64]
    assert sizes_between(2, 9, 3) == [5, 8, 9]


def test_a_scale_up_in_gpus_with_its_prices() -> None:
    plan = build_plan(
        GPUS,
        "update",
        {"num_gpus": "256"},
        start=64,
        staging=Staging(step=32),
        soak=TEN,
        steady_within=HALF,
        hourly_total=Decimal("460.80"),
        currency="USD",
    )
    assert plan.sizes_text() == "64 → 96 → 128 → 160 → 192 → 224 → 256 GPUs"
    assert [s.inputs for s in plan.steps] == [
        {"num_gpus": n} for n in (96, 128, 160, 192, 224, 256)
    ]
    assert plan.step_lines()[0] == "Step 1/6: 64 → 96 GPUs, ≈ +$76.80/h (+$76.80/h in all)"
    assert plan.step_lines()[-1] == "Step 6/6: 224 → 256 GPUs, ≈ +$76.80/h (+$460.80/h in all)"
    assert plan.headline() == (
        "num_gpus 64 → 96 → 128 → 160 → 192 → 224 → 256 GPUs in 6 steps of 32, each held "
        "steady for 10 min (steady within 30 min)"
    )
    assert StagedPlan.of_json(plan.to_json()) == plan


def test_a_scale_down_is_planned_the_same_way_with_savings() -> None:
    plan = build_plan(
        GPUS,
        "update",
        {"num_gpus": 64},
        start=256,
        staging=Staging(step=64),
        soak=TEN,
        steady_within=HALF,
        hourly_total=Decimal("-460.80"),
        currency="USD",
    )
    assert plan.sizes == [256, 192, 128, 64]
    assert plan.step_lines()[1] == "Step 2/3: 192 → 128 GPUs, ≈ -$153.60/h (-$307.20/h in all)"


def test_nodes_added_in_steps_send_what_each_adds() -> None:
    plan = build_plan(
        NODES,
        "scale_cluster",
        {"additional_nodes": "7"},
        start=2,
        staging=Staging(step=3),
        soak=TEN,
        steady_within=HALF,
    )
    assert plan.sizes == [2, 5, 8, 9]
    assert [s.inputs for s in plan.steps] == [
        {"additional_nodes": 3},
        {"additional_nodes": 3},
        {"additional_nodes": 1},
    ]
    assert plan.step_lines()[2] == "Step 3/3: 8 → 9 nodes, price per hour not known"


@pytest.mark.parametrize(
    ("inputs", "step", "says"),
    [
        ({"num_gpus": "256", "num_preemptible_gpus": "8"}, 32, "exactly one of"),
        ({"num_gpus": "256"}, 12, "multiple of 8"),
        ({"num_gpus": "64"}, 32, "already 64"),
        ({"num_gpus": "96"}, 32, "covers the whole change"),
        ({"num_gpus": "many"}, 32, "whole number"),
        ({"num_gpus": "8192"}, 8, "at most 64"),
    ],
)
def test_what_cannot_be_planned_says_why(inputs: dict[str, str], step: int, says: str) -> None:
    with pytest.raises(StagingError, match=says):
        build_plan(
            GPUS,
            "update",
            inputs,
            start=64,
            staging=Staging(step=step),
            soak=TEN,
            steady_within=HALF,
        )


def test_step_applies_to_the_steppable_action_only() -> None:
    with pytest.raises(StagingError, match="scale_cluster only"):
        build_plan(
            NODES,
            "attach_ip",
            {"reserved_ip_id": "5"},
            start=2,
            staging=Staging(step=1),
            soak=TEN,
            steady_within=HALF,
        )


def test_durations() -> None:
    assert parse_duration("30s", "soak") == timedelta(seconds=30)
    assert parse_duration("10m", "soak") == TEN
    assert parse_duration("2h", "soak") == timedelta(hours=2)
    for bad in ("0s", "25h", "10", "1d", "-5m", "1.5m"):
        with pytest.raises(StagingError):
            parse_duration(bad, "soak")
    assert duration_text(timedelta(seconds=45)) == "45 s"
    assert duration_text(timedelta(minutes=90)) == "1 h 30 min"
    assert parse_step("32") == 32
    with pytest.raises(StagingError, match="whole number"):
        parse_step("x")


def test_the_policy_gives_the_defaults(tmp_path: Path) -> None:
    base = "projects:\n  p1:\n    provider: together\n"
    (tmp_path / "a.yml").write_text(base)
    policy = load_policy(tmp_path / "a.yml")
    assert policy.staged.soak == TEN and policy.staged.steady_within == HALF
    (tmp_path / "b.yml").write_text(base + "staged:\n  soak: 30s\n  steady_within: 2m\n")
    policy = load_policy(tmp_path / "b.yml")
    assert policy.staged.soak == timedelta(seconds=30)
    assert policy.staged.steady_within == timedelta(minutes=2)
    assert policy.model_dump(mode="json")["staged"] == {"soak": "30s", "steady_within": "2m"}
    (tmp_path / "c.yml").write_text(base + "staged:\n  soak: 2d\n")
    with pytest.raises(PolicyError, match=r"staged\.soak: a duration from 1s to 24h"):
        load_policy(tmp_path / "c.yml")
