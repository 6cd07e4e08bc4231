"""E2E adapter planning: input parsing, provider rules, previews, and the models'
tolerance of odd replies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import ValidationError

from bot.local.simulators.e2e import E2ESimulator
from bot.providers.base import (
    ChangeInputError,
    ClusterState,
    ClusterSummary,
    nearest_field,
    unknown_field,
)
from bot.providers.e2e import (
    ACTION_ADAPTER,
    ACTIONS,
    DetachIpAction,
    E2EAdapter,
    E2EClusterDetail,
    E2EClusterListItem,
    E2EReservedIp,
    ScaleClusterAction,
    UpdateSshKeysAction,
    build_e2e_transport,
    is_steady,
    normalise_memory,
    to_summary,
)
from bot.providers.e2e import E2EClient as Client
from bot.providers.e2e.adapter import inverse_action
from bot.providers.e2e.rules import parse_action_fields
from bot.providers.errors import RuleViolation
from tests.support.e2e_kit import make_adapter, running_simulator


@pytest.fixture
async def sim() -> AsyncIterator[E2ESimulator]:
    async with running_simulator() as server:
        yield server


@pytest.fixture
def adapter() -> E2EAdapter:
    # Planning makes no calls: the base URL is never contacted.
    transport = build_e2e_transport("unused-key", "unused-token", "http://127.0.0.1:9/x")
    return E2EAdapter(Client(transport, 12345, "Delhi"), "e2e-delhi")


def _state(status: str = "Running", cluster_id: str = "101", **current: Any) -> ClusterState:
    values = {"status": status, "no_of_nodes": 2, "image_version_id": 2, "ssh_key_ids": [1001]}
    values.update(current)
    summary = ClusterSummary(
        provider="e2e",
        project="e2e-delhi",
        cluster_id=cluster_id,
        name="train-h100-a",
        status=status,
        steady=is_steady(status),
        details={"nodes": values["no_of_nodes"]},
    )
    return ClusterState(summary=summary, current=values)


# -- refusals before any call ------------------------------------------------------------------


async def test_action_on_a_cluster_not_running_is_refused_without_a_request(
    sim: E2ESimulator,
) -> None:
    client_adapter = make_adapter(sim.base_url)
    state = await client_adapter.get_cluster("102")
    with pytest.raises(RuleViolation) as caught:
        client_adapter.plan(state, "scale_cluster", {"additional_nodes": "1"})
    await client_adapter.aclose()
    assert "Creating" in caught.value.message
    assert "Running" in caught.value.message
    assert sim.calls("action") == []


@pytest.mark.parametrize("status", ["Running", "running", "RUNNING", " Running "])
def test_running_is_matched_in_any_case_like_is_steady(adapter: E2EAdapter, status: str) -> None:
    assert is_steady(status)
    plan = adapter.plan(_state(status), "scale_cluster", {"additional_nodes": "1"})
    assert plan.body == {"action": "scale_cluster", "additional_nodes": 1}


@pytest.mark.parametrize("status", ["Creating", "creating", "Stopped", "", "Running-ish"])
def test_not_running_in_any_case_is_refused(adapter: E2EAdapter, status: str) -> None:
    with pytest.raises(RuleViolation) as caught:
        adapter.plan(_state(status), "restart_workers", {})
    assert "E2E runs actions only on a Running cluster" in caught.value.message


@pytest.mark.parametrize("nodes", [0, "0", -2, "-1"])
def test_additional_nodes_below_one_is_refused(adapter: E2EAdapter, nodes: Any) -> None:
    with pytest.raises(RuleViolation) as caught:
        adapter.plan(_state(), "scale_cluster", {"additional_nodes": nodes})
    assert caught.value.field == "additional_nodes"
    assert "ADD" in caught.value.message and "at least 1" in caught.value.message


@pytest.mark.parametrize(
    ("action", "name"),
    [("update_ssh_keys", "ssh_key_ids"), ("add_security_group", "security_groups_ids")],
)
@pytest.mark.parametrize("empty", [[], ",", " , "])
def test_empty_id_lists_are_refused(
    adapter: E2EAdapter, action: str, name: str, empty: Any
) -> None:
    with pytest.raises(RuleViolation) as caught:
        adapter.plan(_state(), action, {name: empty})
    assert caught.value.field == name
    assert "at least one" in caught.value.message


@pytest.mark.parametrize(
    ("action", "raw", "name"),
    [
        ("update_image", {"image_version_id": 0}, "image_version_id"),
        ("attach_ip", {"reserved_ip_id": "-5"}, "reserved_ip_id"),
        ("update_ssh_keys", {"ssh_key_ids": "11,0"}, "ssh_key_ids"),
        ("remove_security_group", {"security_group_id": -1}, "security_group_id"),
    ],
)
def test_ids_must_be_positive(
    adapter: E2EAdapter, action: str, raw: dict[str, Any], name: str
) -> None:
    with pytest.raises(RuleViolation) as caught:
        adapter.plan(_state(), action, raw)
    assert caught.value.field == name


def test_input_errors_name_every_bad_field_at_once(adapter: E2EAdapter) -> None:
    raw = {"additional_nodes": "two", "ssh_key_ids": "11", "colour": "blue", "action": "x"}
    with pytest.raises(ChangeInputError) as caught:
        adapter.plan(_state(), "scale_cluster", raw)
    errors = caught.value.errors
    assert set(errors) == {"additional_nodes", "ssh_key_ids", "colour"}
    assert errors["additional_nodes"] == "must be a whole number (got 'two')"
    assert errors["ssh_key_ids"] == "not a field of scale_cluster (fields: additional_nodes)"


@pytest.mark.parametrize(
    ("name", "known", "meant"),
    [
        ("num_gpu", ("cluster_type", "num_gpus", "num_reserved_gpus"), "num_gpus"),
        ("nodes", ("additional_nodes",), "additional_nodes"),
        ("image", ("image_version_id", "ssh_key_ids"), "image_version_id"),
        ("colour", ("additional_nodes",), None),
        ("gpus", ("num_gpus", "num_reserved_gpus"), None),  # two could be meant: say neither
    ],
)
def test_a_near_miss_names_the_field_meant(
    name: str, known: tuple[str, ...], meant: str | None
) -> None:
    assert nearest_field(name, known) == meant
    said = unknown_field(name, known, "x")
    assert (f"did you mean {meant}?" in said) is (meant is not None)


@pytest.mark.parametrize(
    ("action", "raw", "fields"),
    [
        ("scale_cluster", {}, {"additional_nodes"}),
        ("scale_cluster", {"additional_nodes": "  "}, {"additional_nodes"}),
        ("update_ssh_keys", {"ssh_key_ids": "11,abc"}, {"ssh_key_ids"}),
        ("update_ssh_keys", {"ssh_key_ids": None}, {"ssh_key_ids"}),
        ("update_image", {"image_version_id": "5.5"}, {"image_version_id"}),
        ("update_image", {"image_version_id": True}, {"image_version_id"}),
        ("detach_ip", {}, {"reserved_ip_id"}),
        ("restart_cluster", {"additional_nodes": 1}, {"additional_nodes"}),
    ],
)
def test_missing_and_unparseable_fields(
    adapter: E2EAdapter, action: str, raw: dict[str, Any], fields: set[str]
) -> None:
    with pytest.raises(ChangeInputError) as caught:
        adapter.plan(_state(), action, raw)
    assert set(caught.value.errors) == fields


def test_unknown_action(adapter: E2EAdapter) -> None:
    with pytest.raises(ChangeInputError) as caught:
        adapter.plan(_state(), "reboot", {})
    assert set(caught.value.errors) == {"action"}
    assert "scale_cluster" in caught.value.errors["action"]
    with pytest.raises(ChangeInputError):
        adapter.fields_for("reboot")


@pytest.mark.parametrize("cluster_id", ["abc", "12a", "0", ""])
async def test_cluster_ids_must_be_numbers(adapter: E2EAdapter, cluster_id: str) -> None:
    with pytest.raises(ChangeInputError) as at_get:
        await adapter.get_cluster(cluster_id)
    assert set(at_get.value.errors) == {"cluster_id"}
    with pytest.raises(ChangeInputError) as at_plan:
        adapter.plan(_state(cluster_id=cluster_id), "restart_cluster", {})
    assert set(at_plan.value.errors) == {"cluster_id"}


# -- plans ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "raw", "body", "preview"),
    [
        (
            "scale_cluster",
            {"additional_nodes": "2"},
            {"additional_nodes": 2},
            "scale_cluster: 2 → 4 nodes",
        ),
        (
            "update_image",
            {"image_version_id": 5},
            {"image_version_id": 5},
            "update_image: image 2 → 5",
        ),
        (
            "update_ssh_keys",
            {"ssh_key_ids": " 11, 12 "},
            {"ssh_key_ids": [11, 12]},
            "update_ssh_keys: ssh keys [1001] → [11, 12]",
        ),
        ("restart_cluster", {}, {}, "restart_cluster: Running → restart all nodes (2 nodes)"),
        ("restart_workers", {}, {}, "restart_workers: Running → restart the workers (2 nodes)"),
        (
            "attach_ip",
            {"reserved_ip_id": "501"},
            {"reserved_ip_id": 501},
            "attach_ip: reserved IP → 501",
        ),
        (
            "detach_ip",
            {"reserved_ip_id": 501},
            {"reserved_ip_id": 501, "ip_type": "reserved"},
            "detach_ip: reserved IP 501 → detached",
        ),
        (
            "add_security_group",
            {"security_groups_ids": ["602", 603]},
            {"security_groups_ids": [602, 603]},
            "add_security_group: security groups → +602, +603",
        ),
        (
            "remove_security_group",
            {"security_group_id": "601"},
            {"security_group_id": 601},
            "remove_security_group: security group 601 → removed",
        ),
    ],
)
def test_plan_body_and_preview(
    adapter: E2EAdapter, action: str, raw: dict[str, Any], body: dict[str, Any], preview: str
) -> None:
    plan = adapter.plan(_state(), action, raw)
    assert plan.body == {"action": action, **body}
    assert plan.preview_text() == preview
    assert plan.action == action and plan.kinds == [action]
    assert (plan.provider, plan.project, plan.cluster_id) == ("e2e", "e2e-delhi", "101")
    assert plan.cluster_name == "train-h100-a"
    assert plan.fingerprint == {
        "status": "Running",
        "no_of_nodes": 2,
        "image_version_id": 2,
        "ssh_key_ids": [1001],
    }


def test_scale_preview_line_parts(adapter: E2EAdapter) -> None:
    plan = adapter.plan(_state(no_of_nodes=3), "scale_cluster", {"additional_nodes": 5})
    line = plan.lines[0]
    assert (line.field, line.before, line.after, line.unit) == ("scale_cluster:", "3", "8", "nodes")


def test_a_one_node_cluster_is_one_node_not_one_nodes(adapter: E2EAdapter) -> None:
    plan = adapter.plan(_state(no_of_nodes=1), "restart_workers", {})
    assert plan.preview_text() == "restart_workers: Running → restart the workers (1 node)"


def test_actions_and_fields(adapter: E2EAdapter) -> None:
    assert adapter.provider == "e2e"
    assert adapter.actions() == list(ACTIONS)
    assert len(ACTIONS) == 9
    expected = {
        "update_ssh_keys": [("ssh_key_ids", "int_list")],
        "update_image": [("image_version_id", "int")],
        "restart_workers": [],
        "restart_cluster": [],
        "scale_cluster": [("additional_nodes", "int")],
        "attach_ip": [("reserved_ip_id", "int")],
        "detach_ip": [("reserved_ip_id", "int")],
        "remove_security_group": [("security_group_id", "int")],
        "add_security_group": [("security_groups_ids", "int_list")],
    }
    for action in ACTIONS:
        specs = adapter.fields_for(action)
        assert [(s.name, s.kind) for s in specs] == expected[action]
        assert all(s.required and s.hint and s.label for s in specs)


# -- action models ---------------------------------------------------------------------------


def test_action_models_take_exactly_their_fields() -> None:
    with pytest.raises(ValidationError):
        ScaleClusterAction.model_validate({"additional_nodes": 1, "ssh_key_ids": [1]})
    with pytest.raises(ValidationError):
        ScaleClusterAction(additional_nodes=0)
    with pytest.raises(ValidationError):
        UpdateSshKeysAction(ssh_key_ids=[])
    with pytest.raises(ValidationError):
        ACTION_ADAPTER.validate_python({"action": "scale_cluster", "additional_nodes": "2"})
    with pytest.raises(ValidationError):
        ACTION_ADAPTER.validate_python({"action": "resize"})
    with pytest.raises(ValidationError):
        DetachIpAction.model_validate({"reserved_ip_id": 1, "ip_type": "floating"})
    parsed = ACTION_ADAPTER.validate_python({"action": "detach_ip", "reserved_ip_id": 7})
    assert isinstance(parsed, DetachIpAction)
    assert parsed.model_dump() == {
        "action": "detach_ip",
        "reserved_ip_id": 7,
        "ip_type": "reserved",
    }


# -- reply models and summaries ------------------------------------------------------------


def test_models_tolerate_unknown_statuses_fields_and_odd_values() -> None:
    detail = E2EClusterDetail.model_validate(
        {
            "id": 9,
            "status": "Hibernating",
            "no_of_nodes": "3",
            "total_gpu": "24",
            "total_memory": "6000GB",
            "sku_details": None,
            "image_version": "not an object",
            "ssh_keys": [{"pk": "5"}, "junk"],
            "brand_new_field": {"x": 1},
        }
    )
    assert (detail.status, detail.no_of_nodes, detail.total_gpu) == ("Hibernating", 3, 24)
    assert detail.total_memory == "6000 GB"
    assert detail.ssh_key_ids == [5]
    assert detail.image_version is None
    assert detail.model_extra == {"brand_new_field": {"x": 1}}
    summary = to_summary(detail, "p")
    assert (summary.status, summary.steady) == ("Hibernating", False)
    assert (summary.details["sku"], summary.billing, summary.region) == (None, None, None)
    assert summary.size == "3 nodes"

    item = E2EClusterListItem.model_validate({"id": 3, "no_of_gpu": "eight", "status": None})
    assert (item.no_of_gpu, item.status) == (None, "Unknown")
    assert E2EReservedIp.model_validate({"id": "501", "extra": 1}).id == 501


def test_list_item_summary_multiplies_per_node_counts() -> None:
    item = E2EClusterListItem.model_validate(
        {
            "id": 1,
            "name": "c",
            "status": "Running",
            "no_of_nodes": 3,
            "no_of_gpu": "8",
            "no_of_cpu": "208",
            "node_memory": "2000GB",
            "sku_details": {
                "specs": {"name": "S", "gpu_card_type": "H100"},
                "plan": {
                    "sku_type": "committed",
                    "committed_days": 30,
                    "unit_price": "5000",
                    "currency": "INR",
                    "location": "Chennai",
                },
            },
            "image_version": {"id": 4, "name": "NeMo", "version": "v4"},
        }
    )
    summary = to_summary(item, "proj")
    details = summary.details
    assert (details["nodes"], details["gpus"], details["cpus"]) == (3, 24, 624)
    assert details["memory"] == "6000 GB"
    assert summary.billing == "committed 30 days · ₹5,000.00 per node · ₹15,000.00 for 3 nodes"
    assert summary.region == "Chennai"
    assert details["image"] == "NeMo v4 (id 4)"
    assert [(f.label, f.value) for f in summary.facts] == [
        ("Nodes / GPUs", "3 nodes · 24 x H100"),
        ("CPUs / memory", "624 CPUs · 6000 GB"),
        ("Image", "NeMo v4 (id 4)"),
        ("SKU", "S"),
        ("Region", "Chennai"),
        ("Billing", "committed 30 days · ₹5,000.00 per node · ₹15,000.00 for 3 nodes"),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2000GB", "2000 GB"),
        ("2000 GB", "2000 GB"),
        (" 0GB ", "0 GB"),
        ("1.5TB", "1.5 TB"),
        ("lots", "lots"),
        (None, None),
        (512, "512"),
    ],
)
def test_memory_normalisation(text: Any, expected: str | None) -> None:
    assert normalise_memory(text) == expected


@pytest.mark.parametrize(
    ("status", "steady"),
    [
        ("Running", True),
        ("Stopped", True),
        ("Failed", True),
        ("Error", True),
        ("Creating", False),
        ("Scaling", False),
        ("Restarting", False),
        ("Updating", False),
        ("SomethingNew", False),
        ("", False),
    ],
)
def test_steady_statuses(status: str, steady: bool) -> None:
    assert is_steady(status) is steady


def test_the_inverse_of_each_e2e_action_follows_spec_9() -> None:
    def inverse(action: str, body: dict[str, object], prior: dict[str, object]) -> object:
        found = inverse_action(action, body, prior)
        return None if found is None else (found.action, found.inputs)

    assert inverse("attach_ip", {"reserved_ip_id": 501}, {}) == (
        "detach_ip",
        {"reserved_ip_id": "501"},
    )
    assert inverse("detach_ip", {"reserved_ip_id": 501, "ip_type": "reserved"}, {}) == (
        "attach_ip",
        {"reserved_ip_id": "501"},
    )
    assert inverse("add_security_group", {"security_groups_ids": [602]}, {}) == (
        "remove_security_group",
        {"security_group_id": "602"},
    )
    assert inverse("add_security_group", {"security_groups_ids": [602, 603]}, {}) is None
    assert inverse("remove_security_group", {"security_group_id": 601}, {}) == (
        "add_security_group",
        {"security_groups_ids": "601"},
    )
    assert inverse("update_image", {"image_version_id": 7}, {"image_version_id": 5}) == (
        "update_image",
        {"image_version_id": "5"},
    )
    assert inverse("update_image", {"image_version_id": 7}, {"image_version_id": None}) is None
    assert inverse("update_ssh_keys", {"ssh_key_ids": [12]}, {"ssh_key_ids": [11, 12]}) == (
        "update_ssh_keys",
        {"ssh_key_ids": "11,12"},
    )
    for action in ("scale_cluster", "restart_workers", "restart_cluster"):
        assert inverse(action, {"additional_nodes": 1}, {}) is None


def test_a_stored_detach_ip_body_plans_again() -> None:
    stored = {"action": "detach_ip", "reserved_ip_id": 501, "ip_type": "reserved"}
    assert parse_action_fields("detach_ip", stored) == {"reserved_ip_id": 501}


def test_e2e_acts_only_on_a_running_cluster_as_its_rules_refuse() -> None:
    from bot.providers.e2e.descriptor import DESCRIPTOR
    from bot.providers.together.descriptor import DESCRIPTOR as TOGETHER

    assert DESCRIPTOR.acts_on("Running") and DESCRIPTOR.acts_on(" running ")
    assert not DESCRIPTOR.acts_on("Failed") and not DESCRIPTOR.acts_on("Creating")
    assert TOGETHER.acts_on("Failed")  # Together's adapter refuses no status
