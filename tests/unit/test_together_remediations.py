"""Remediation models parse what Together may send (unknown enum values, extra fields,
nulls, blank times) and "no longer pending" refusals are told apart from other 4xx."""

from __future__ import annotations

from typing import Any

import pytest

from bot.providers.together.models import FINAL_STATES, Remediation, RemediationPage
from bot.providers.together.remediations import (
    decision_path,
    remediations_path,
    says_not_pending,
    xid_summary,
)


def _raw(**overrides: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "id": "rem-1",
        "cluster_id": "tc-1",
        "instance_id": "i-1",
        "mode": "REMEDIATION_MODE_VM_ONLY",
        "state": "PENDING_APPROVAL",
        "trigger": "REMEDIATION_TRIGGER_AUTOMATED",
    }
    raw.update(overrides)
    return raw


def _alert(**overrides: Any) -> dict[str, Any]:
    alert: dict[str, Any] = {
        "alert_name": "DmesgXidError",
        "annotations": {"summary": "GPU Xid error", "evidence": "gpu-0: Xid 79"},
        "cluster_id": "tc-1",
        "passive_health_check_alert_id": "a-1",
        "severity": "PHC_SEVERITY_CRITICAL",
        "started_at": "2026-11-30T17:00:00Z",
        "target_vm": "gpu-0",
    }
    alert.update(overrides)
    return alert


def test_unknown_enum_values_and_extra_fields_are_kept() -> None:
    item = Remediation.model_validate(
        _raw(
            mode="REMEDIATION_MODE_TELEPORT",
            state="ON_HOLD",
            trigger="REMEDIATION_TRIGGER_ORACLE",
            priority=7,
            linked_alerts=[_alert(severity="PHC_SEVERITY_APOCALYPTIC", shard="b")],
        )
    )
    assert (item.mode, item.state, item.trigger) == (
        "REMEDIATION_MODE_TELEPORT",
        "ON_HOLD",
        "REMEDIATION_TRIGGER_ORACLE",
    )
    assert item.mode_text == "REMEDIATION_MODE_TELEPORT"
    assert not item.awaiting_approval and not item.finished
    assert item.model_extra == {"priority": 7}
    assert item.linked_alerts[0].severity == "PHC_SEVERITY_APOCALYPTIC"


def test_nulls_and_blank_times_are_tolerated() -> None:
    item = Remediation.model_validate(
        _raw(linked_alerts=None, end_time="", create_time="2026-11-30T17:00:00Z")
    )
    assert item.linked_alerts == [] and item.end_time is None
    assert item.node == "i-1"
    page = RemediationPage.model_validate({"remediations": None, "has_next": False})
    assert page.remediations == [] and page.next_page_token == ""


def test_legacy_annotations_stand_in_for_the_typed_annotation() -> None:
    item = Remediation.model_validate(_raw(linked_alerts=[_alert()]))
    (alert,) = item.linked_alerts
    assert (alert.title, alert.summary_line, alert.xid_events) == (
        "GPU Xid error",
        "gpu-0: Xid 79",
        [],
    )


def test_typed_annotation_and_xid_totals() -> None:
    xid = {"events": [{"xid_code": "79", "count": 2, "mnemonic": "fell off the bus"}]}
    typed = {"title": "Xid", "summary_line": "gpu-0: 79", "description": "d", "xid": xid}
    second = {"title": "Xid", "summary_line": "s", "description": "d", "xid": {"events": None}}
    third = {
        "title": "Xid",
        "summary_line": "s",
        "description": "d",
        "xid": {"events": [{"xid_code": "48", "count": 2}, {"xid_code": "79", "count": 1}]},
    }
    item = Remediation.model_validate(
        _raw(
            linked_alerts=[
                _alert(annotation=typed),
                _alert(annotation=second),
                _alert(annotation=third),
            ]
        )
    )
    assert item.linked_alerts[0].title == "Xid"
    assert xid_summary(item.linked_alerts) == [("79", 3), ("48", 2)]


def test_final_states() -> None:
    assert {str(s) for s in FINAL_STATES} == {"SUCCEEDED", "FAILED", "CANCELLED", "AUTO_RESOLVED"}


@pytest.mark.parametrize(
    ("status", "message", "decided"),
    [
        (409, "conflict", True),
        (400, "remediation rem-1 is in state RUNNING; only PENDING_APPROVAL ...", True),
        (400, "remediation is not pending", True),
        (412, "remediation already approved", True),
        (400, "invalid state transition from CANCELLED", True),
        (400, "REMEDIATION_MODE_HOST_POWER_CYCLE cannot be set as an approval override", False),
        (400, "comment too long", False),
        (404, "remediation not found", False),
        (403, "pending approval requires the admin role", False),
    ],
)
def test_no_longer_pending_is_told_apart(status: int, message: str, decided: bool) -> None:
    assert says_not_pending(status, message) is decided


def test_paths_quote_ids_and_list_across_nodes() -> None:
    assert remediations_path("tc-1") == "compute/clusters/tc-1/instances/-/remediations"
    item = Remediation.model_validate(_raw(id="rem/1", instance_id="i 1"))
    assert decision_path(item, "approve") == (
        "compute/clusters/tc-1/instances/i%201/remediations/rem%2F1/approve"
    )
