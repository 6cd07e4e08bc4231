"""The Together update rules (SPEC §1.1), change kinds, raw-input parsing and the adapter's
plan, all without HTTP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from bot.local.simulators.together import seed_clusters
from bot.providers.base import ChangeInputError, ChangePlan, ClusterState
from bot.providers.errors import RuleViolation
from bot.providers.together import (
    UPDATE_FIELDS,
    ClusterType,
    ClusterUpdate,
    TogetherAdapter,
    TogetherCluster,
    check_update,
    classify,
    cluster_state,
    parse_update,
    to_summary,
)
from bot.providers.together.descriptor import DESCRIPTOR
from tests.support.together_kit import client_for

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
SEEDS = seed_clusters(NOW)
SCHED_END = NOW + timedelta(days=5)  # tc-h100-sched's reservation_end_time
SECOND = timedelta(seconds=1)


def cluster(cluster_id: str, **changes: Any) -> TogetherCluster:
    return TogetherCluster.model_validate({**SEEDS[cluster_id], **changes})


def state(cluster_id: str, **changes: Any) -> ClusterState:
    return cluster_state(cluster(cluster_id, **changes), "ml-prod")


def adapter() -> TogetherAdapter:
    return TogetherAdapter(client_for("http://127.0.0.1:9/v1"), "ml-prod", now=lambda: NOW)


def refusal(target: TogetherCluster | ClusterState, **fields: Any) -> RuleViolation:
    with pytest.raises(RuleViolation) as caught:
        check_update(target, ClusterUpdate(**fields), NOW)
    return caught.value


# -- rules ---------------------------------------------------------------------------------
@pytest.mark.parametrize("as_state", [False, True], ids=["cluster", "state"])
def test_each_rule_names_its_field(as_state: bool) -> None:
    def target(cluster_id: str) -> TogetherCluster | ClusterState:
        return state(cluster_id) if as_state else cluster(cluster_id)

    later = NOW + timedelta(days=3)
    cases: list[tuple[str, dict[str, Any], str | None, str]] = [
        ("tc-h100-reserved", {}, None, "nothing to change"),
        (
            "tc-h200-ondemand",
            {"num_gpus": 12},
            "num_gpus",
            "num_gpus must be a multiple of 8 (got 12; try 8 or 16)",
        ),
        (
            "tc-h200-ondemand",
            {"num_preemptible_gpus": 12},
            "num_preemptible_gpus",
            "num_preemptible_gpus must be a multiple of 8 (got 12; try 8 or 16)",
        ),
        (
            "tc-b200-pool",
            {"num_capacity_pool_gpus": 20},
            "num_capacity_pool_gpus",
            "num_capacity_pool_gpus must be a multiple of 8 (got 20; try 16 or 24)",
        ),
        (
            "tc-h100-reserved",
            {"num_capacity_pool_gpus": 8},
            "num_capacity_pool_gpus",
            "train-h100-reserved has no capacity_pool_id",
        ),
        (
            "tc-b200-pool",
            {"num_capacity_pool_gpus": 40},
            "num_capacity_pool_gpus",
            "cannot exceed num_gpus (got 40, num_gpus would be 32",
        ),
        (
            "tc-b200-pool",
            {"num_gpus": 48, "num_capacity_pool_gpus": 56},
            "num_capacity_pool_gpus",
            "num_gpus would be 48",
        ),
        (
            "tc-b200-pool",
            {"num_gpus": 8},
            "num_gpus",
            "num_gpus 8 would be below num_capacity_pool_gpus (16)",
        ),
        (
            "tc-h200-ondemand",
            {"num_reserved_gpus": 8},
            "num_reserved_gpus",
            "num_reserved_gpus applies only to RESERVED clusters; infer-h200 is billed ON_DEMAND",
        ),
        (
            "tc-h100-sched",
            {"num_reserved_gpus": 8},
            "num_reserved_gpus",
            "is billed SCHEDULED_CAPACITY",
        ),
        (
            "tc-h200-ondemand",
            {"reservation_end_time": later},
            "reservation_end_time",
            "applies only to prepaid clusters (RESERVED or SCHEDULED_CAPACITY)",
        ),
        (
            "tc-h100-reserved",
            {"reservation_end_time": NOW - timedelta(hours=1)},
            "reservation_end_time",
            "must be in the future (got 2026-09-01T11:00:00Z; it is now 2026-09-01T12:00:00Z)",
        ),
        (
            "tc-h200-ondemand",
            {"num_gpus": 8},
            "num_gpus",
            "nothing would change: num_gpus is already 8",
        ),
        (
            "tc-h200-ondemand",
            {"cluster_type": ClusterType.SLURM, "num_preemptible_gpus": 0},
            "cluster_type",
            "nothing would change: cluster_type is already SLURM, "
            "num_preemptible_gpus is already 0",
        ),
    ]
    for cluster_id, fields, field, message in cases:
        violation = refusal(target(cluster_id), **fields)
        assert violation.field == field, (cluster_id, fields)
        assert message in violation.message, (violation.message, message)


def test_the_same_end_time_in_another_zone_changes_nothing() -> None:
    end = cluster("tc-h100-reserved").reservation_end_time
    assert end is not None
    shifted = end.astimezone(timezone(timedelta(hours=-5)))
    violation = refusal(state("tc-h100-reserved"), reservation_end_time=shifted)
    assert violation.message.startswith("nothing would change: reservation_end_time is already")


@pytest.mark.parametrize(
    ("cluster_id", "fields"),
    [
        ("tc-h200-ondemand", {"num_preemptible_gpus": 16}),
        ("tc-h200-ondemand", {"num_gpus": 8, "cluster_type": ClusterType.KUBERNETES}),
        ("tc-b200-pool", {"num_capacity_pool_gpus": 32}),
        ("tc-b200-pool", {"num_capacity_pool_gpus": 0}),
        ("tc-b200-pool", {"num_gpus": 48, "num_capacity_pool_gpus": 48}),
        ("tc-b200-pool", {"num_gpus": 8, "num_capacity_pool_gpus": 8}),
        ("tc-h100-reserved", {"num_reserved_gpus": 8}),
        ("tc-h100-reserved", {"num_gpus": 0}),
        ("tc-h100-sched", {"reservation_end_time": NOW + timedelta(minutes=5)}),
    ],
)
def test_allowed_updates_pass(cluster_id: str, fields: dict[str, Any]) -> None:
    check_update(cluster(cluster_id), ClusterUpdate(**fields), NOW)
    check_update(state(cluster_id), ClusterUpdate(**fields), NOW)


def test_an_empty_capacity_pool_id_means_no_pool() -> None:
    violation = refusal(cluster("tc-h200-ondemand", capacity_pool_id=""), num_capacity_pool_gpus=8)
    assert violation.field == "num_capacity_pool_gpus"


def test_unknown_billing_type_refuses_billing_bound_fields() -> None:
    violation = refusal(state("tc-h100-reserved", billing_type="PAYG_V2"), num_reserved_gpus=8)
    assert "is billed PAYG_V2" in violation.message


# -- change kinds --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cluster_id", "fields", "kinds"),
    [
        ("tc-h200-ondemand", {"num_gpus": 16}, ["scale_up"]),
        ("tc-h100-reserved", {"num_gpus": 8}, ["scale_down"]),
        ("tc-h100-reserved", {"num_reserved_gpus": 24}, ["scale_up"]),
        ("tc-h200-ondemand", {"num_preemptible_gpus": 8}, ["scale_up"]),
        ("tc-b200-pool", {"num_capacity_pool_gpus": 8}, ["scale_down"]),
        ("tc-b200-pool", {"num_gpus": 48, "num_reserved_gpus": 8}, ["scale_up", "scale_down"]),
        ("tc-h200-ondemand", {"cluster_type": ClusterType.KUBERNETES}, ["change_type"]),
        ("tc-h200-ondemand", {"cluster_type": ClusterType.SLURM, "num_gpus": 16}, ["scale_up"]),
        ("tc-h100-sched", {"reservation_end_time": NOW + timedelta(days=1)}, ["decommission"]),
        # the reminder's "Extend reservation…": the end moves later (sched ends in 5 days)
        ("tc-h100-sched", {"reservation_end_time": SCHED_END + SECOND}, ["extend_reservation"]),
        ("tc-h100-sched", {"reservation_end_time": SCHED_END - SECOND}, ["decommission"]),
        ("tc-h100-sched", {"reservation_end_time": NOW + timedelta(hours=1)}, ["decommission"]),
        (
            "tc-h100-reserved",
            {
                "num_gpus": 8,
                "cluster_type": ClusterType.SLURM,
                "reservation_end_time": NOW + timedelta(days=1),
            },
            ["scale_down", "change_type", "decommission"],
        ),
    ],
)
def test_classify(cluster_id: str, fields: dict[str, Any], kinds: list[str]) -> None:
    assert classify(cluster(cluster_id), ClusterUpdate(**fields)) == kinds
    assert classify(state(cluster_id), ClusterUpdate(**fields)) == kinds


def test_preemptible_compares_with_desired_not_allocated() -> None:
    target = cluster("tc-h200-ondemand", desired_preemptible_gpus=16, allocated_preemptible_gpus=0)
    assert classify(target, ClusterUpdate(num_preemptible_gpus=8)) == ["scale_down"]


# -- the update body -----------------------------------------------------------------------
def test_update_body_has_only_set_fields_with_utc_z() -> None:
    end = datetime(2026, 10, 1, 14, 30, tzinfo=timezone(timedelta(hours=2)))
    update = ClusterUpdate(num_gpus=16, reservation_end_time=end, num_reserved_gpus=0)
    assert update.to_body() == {
        "num_gpus": 16,
        "num_reserved_gpus": 0,
        "reservation_end_time": "2026-10-01T12:30:00Z",
    }
    assert ClusterUpdate(cluster_type=ClusterType.SLURM).to_body() == {"cluster_type": "SLURM"}
    assert ClusterUpdate().to_body() == {}


@pytest.mark.parametrize(
    "fields",
    [
        {"num_gpus": -8},
        {"num_gpus": True},
        {"num_gpus": "16"},
        {"reservation_end_time": datetime(2026, 10, 1)},
        {"cluster_type": "NOMAD"},
        {"add_ons": []},
    ],
)
def test_update_model_refuses_bad_values(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ClusterUpdate(**fields)


# -- raw input -----------------------------------------------------------------------------
def test_every_bad_field_is_reported_at_once() -> None:
    with pytest.raises(ChangeInputError) as caught:
        parse_update(
            {
                "num_gpus": "sixteen",
                "num_reserved_gpus": "-8",
                "num_preemptible_gpus": "8.5",
                "num_capacity_pool_gpus": True,
                "cluster_type": "nomad",
                "reservation_end_time": "tomorrow",
                "colour": "red",
            }
        )
    errors = caught.value.errors
    assert set(errors) == {*UPDATE_FIELDS, "colour"}
    assert errors["num_gpus"] == "must be a whole number (got 'sixteen')"
    assert errors["num_reserved_gpus"] == "must be 0 or more (got -8)"
    assert errors["cluster_type"] == "must be KUBERNETES or SLURM (got 'nomad')"
    assert "RFC 3339" in errors["reservation_end_time"]
    assert errors["colour"].startswith("not a field of update (fields: cluster_type, num_gpus")


def test_blank_values_are_not_set_and_text_is_trimmed() -> None:
    update = parse_update(
        {
            "num_gpus": " 24 ",
            "cluster_type": "",
            "reservation_end_time": "   ",
            "num_reserved_gpus": None,
        }
    )
    assert update.to_body() == {"num_gpus": 24}


def test_typed_and_slack_shaped_values_parse() -> None:
    end = datetime(2026, 10, 1, tzinfo=UTC)
    typed = parse_update(
        {"num_gpus": 16, "cluster_type": ClusterType.SLURM, "reservation_end_time": end}
    )
    assert typed.to_body() == {
        "cluster_type": "SLURM",
        "num_gpus": 16,
        "reservation_end_time": "2026-10-01T00:00:00Z",
    }
    epoch = int(end.timestamp())
    assert parse_update({"reservation_end_time": str(epoch)}).reservation_end_time == end
    assert parse_update({"reservation_end_time": epoch}).reservation_end_time == end
    assert parse_update({"cluster_type": " kubernetes "}).cluster_type == ClusterType.KUBERNETES
    offset = parse_update({"reservation_end_time": "2026-10-01T02:00:00+02:00"})
    assert offset.to_body() == {"reservation_end_time": "2026-10-01T00:00:00Z"}


def test_a_time_without_zone_is_refused_with_an_example() -> None:
    with pytest.raises(ChangeInputError) as caught:
        parse_update({"reservation_end_time": "2026-10-01T00:00:00"})
    assert caught.value.errors == {
        "reservation_end_time": "needs a time zone, e.g. 2026-10-01T00:00:00Z for UTC"
    }


# -- the adapter's plan --------------------------------------------------------------------
def test_plan_builds_body_preview_kinds_and_fingerprint() -> None:
    together = adapter()
    current = state("tc-b200-pool")
    plan = together.plan(
        current,
        "update",
        {
            "reservation_end_time": "2026-12-01T00:00:00Z",
            "num_capacity_pool_gpus": "8",
            "num_gpus": "48",
            "cluster_type": "",
        },
    )
    assert isinstance(plan, ChangePlan)
    assert (plan.provider, plan.project, plan.cluster_id, plan.cluster_name, plan.action) == (
        "together",
        "ml-prod",
        "tc-b200-pool",
        "train-b200-pool",
        "update",
    )
    assert plan.body == {
        "num_gpus": 48,
        "num_capacity_pool_gpus": 8,
        "reservation_end_time": "2026-12-01T00:00:00Z",
    }
    assert plan.kinds == ["scale_up", "scale_down", "extend_reservation"]
    end_before = current.current["reservation_end_time"]
    assert [line.text() for line in plan.lines] == [
        "num_gpus 32 → 48",
        "num_capacity_pool_gpus 16 → 8",
        f"reservation_end_time {end_before} → 2026-12-01T00:00:00Z",
    ]
    assert plan.fingerprint == {
        "cluster_type": "KUBERNETES",
        "num_gpus": 32,
        "num_reserved_gpus": 16,
        "num_preemptible_gpus": 0,
        "num_capacity_pool_gpus": 16,
        "reservation_end_time": end_before,
    }  # the settable fields only: finishing provisioning does not make a preview stale


def test_plan_shows_a_missing_before_value() -> None:
    plan = adapter().plan(
        state("tc-h100-sched", reservation_end_time=None),
        "update",
        {"reservation_end_time": "2026-09-03T00:00:00Z"},
    )
    assert plan.lines[0].text() == "reservation_end_time → 2026-09-03T00:00:00Z"


def test_plan_refuses_by_rule_with_the_adapter_clock() -> None:
    with pytest.raises(RuleViolation) as caught:
        adapter().plan(
            state("tc-h100-reserved"), "update", {"reservation_end_time": "2026-09-01T11:00:00Z"}
        )
    assert caught.value.field == "reservation_end_time"
    with pytest.raises(RuleViolation) as nothing:
        adapter().plan(state("tc-h100-reserved"), "update", {"num_gpus": "", "cluster_type": ""})
    assert nothing.value.message.startswith("nothing to change")


def test_plan_refuses_unparseable_input_before_rules() -> None:
    with pytest.raises(ChangeInputError) as caught:
        adapter().plan(
            state("tc-h200-ondemand"), "update", {"num_gpus": "x", "num_reserved_gpus": "8"}
        )
    assert set(caught.value.errors) == {"num_gpus"}


def test_adapter_describes_its_single_action() -> None:
    together = adapter()
    assert together.provider == "together"
    assert together.actions() == ["update"]
    specs = together.fields_for("update")
    assert tuple(s.name for s in specs) == UPDATE_FIELDS
    kinds = {s.name: s.kind for s in specs}
    assert kinds["cluster_type"] == "choice" and kinds["reservation_end_time"] == "datetime"
    assert {kinds[name] for name in UPDATE_FIELDS[1:5]} == {"int"}
    assert specs[0].choices == ("KUBERNETES", "SLURM")
    hints = {s.name: s.hint for s in specs}
    assert "multiple of 8" in hints["num_gpus"]
    assert "multiple of 8" in hints["num_preemptible_gpus"]
    assert "multiple of 8" in hints["num_capacity_pool_gpus"]
    assert not any(s.required for s in specs)
    with pytest.raises(ValueError, match="only the 'update' action"):
        together.fields_for("scale_cluster")
    with pytest.raises(ChangeInputError):
        together.plan(state("tc-h200-ondemand"), "restart", {"num_gpus": "16"})


async def test_apply_refuses_a_plan_for_another_provider() -> None:
    together = adapter()
    plan = together.plan(state("tc-h200-ondemand"), "update", {"num_gpus": "16"})
    with pytest.raises(ValueError, match="not a Together update plan"):
        await together.apply(plan.model_copy(update={"provider": "e2e"}))
    await together.aclose()


# -- summaries -----------------------------------------------------------------------------
def test_summary_and_current_values() -> None:
    target = cluster("tc-b200-pool", desired_preemptible_gpus=8, allocated_preemptible_gpus=0)
    summary = to_summary(target, "ml-prod")
    assert summary.provider == "together" and summary.project == "ml-prod"
    assert (summary.name, summary.status, summary.steady) == ("train-b200-pool", "Ready", True)
    assert (summary.billing, summary.region, summary.gpu_type) == (
        "RESERVED",
        "us-central-8",
        "B200_SXM",
    )
    details = summary.details
    assert (details["num_gpus"], details["num_reserved_gpus"]) == (32, 16)
    assert details["num_capacity_pool_gpus"] == 16
    assert (details["desired_preemptible_gpus"], details["allocated_preemptible_gpus"]) == (8, 0)
    assert details["capacity_pool_id"] == "pool-b200-1"
    assert details["reservation_end_time"] == "2026-09-26T12:00:00Z"
    assert summary.size == "32 GPUs"
    assert [(f.label, f.value) for f in summary.facts] == [
        ("GPU type", "B200_SXM"),
        ("GPUs", "32 total · 16 reserved"),
        ("Preemptible", "8 desired · 0 allocated"),
        ("Capacity pool", "16 (pool-b200-1)"),
        ("Type", "KUBERNETES"),
        ("Region", "us-central-8"),
        ("Billing", "RESERVED · ends 2026-09-26T12:00:00Z"),
    ]
    current = cluster_state(target, "ml-prod").current
    assert current == {
        "cluster_type": "KUBERNETES",
        "num_gpus": 32,
        "num_reserved_gpus": 16,
        "num_preemptible_gpus": 8,
        "num_capacity_pool_gpus": 16,
        "reservation_end_time": "2026-09-26T12:00:00Z",
    }


@pytest.mark.parametrize(
    ("status", "steady"),
    [
        ("Ready", True),
        ("Degraded", True),
        ("Paused", True),
        ("OnDemandComputePaused", True),
        ("InstallingDrivers", False),
        ("Deleting", False),
        ("SomethingNew", False),
    ],
)
def test_steady_statuses(status: str, steady: bool) -> None:
    assert to_summary(cluster("tc-h100-reserved", status=status), "p").steady is steady


@pytest.mark.parametrize("field", ["num_gpus", "num_preemptible_gpus", "num_capacity_pool_gpus"])
@pytest.mark.parametrize("value", [1, 4, 7, 9, 20])
def test_gpu_counts_must_be_multiples_of_8(field: str, value: int) -> None:
    caught = refusal(cluster("tc-b200-pool"), **{field: value})
    assert caught.field == field
    lower = value // 8 * 8
    assert caught.message == (
        f"{field} must be a multiple of 8 (got {value}; try {lower} or {lower + 8})"
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [("num_gpus", 64), ("num_preemptible_gpus", 24), ("num_capacity_pool_gpus", 24)],
)
def test_gpu_counts_that_are_multiples_of_8_pass(field: str, value: int) -> None:
    check_update(cluster("tc-b200-pool"), ClusterUpdate(**{field: value}), NOW)


def test_an_extension_needs_no_approval_by_default_a_decommission_does() -> None:
    assert "extend_reservation" in DESCRIPTOR.kinds
    assert "extend_reservation" not in DESCRIPTOR.approval_by_default
    assert "decommission" in DESCRIPTOR.approval_by_default
