"""``/gpu audit`` marks what bypassed the usual safeguards: break glass and freeze overrides."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bot.core.store import AuditEntry
from bot.slack.render import answers


def _row(event: str, outcome: str | None, detail: dict[str, Any]) -> str:
    entry = AuditEntry(
        id=1,
        at=datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
        actor="U04DAVE",
        event=event,
        project="e2e-delhi",
        cluster_id="101",
        request_id="CR-PFXSA6",
        outcome=outcome,
        detail=detail,
    )
    return answers.audit_list([entry]).text


def test_a_break_glass_approval_is_marked() -> None:
    row = _row("approved", "approved", {"break_glass": True, "reason": "sev1"})
    assert ":rotating_light: *BREAK GLASS*" in row
    assert "sev1" in row


def test_a_break_glass_of_several_needed_is_marked() -> None:
    assert "*BREAK GLASS*" in _row("break_glass", "1 of 2", {"break_glass": True, "reason": "x"})


def test_a_freeze_override_is_marked() -> None:
    row = _row("freeze_override", "quarter-end", {"reason": "sev1 outage", "until": "2026-12-02"})
    assert ":snowflake: *FREEZE OVERRIDE*" in row


def test_an_ordinary_approval_is_not_marked() -> None:
    row = _row("approved", "approved", {"break_glass": False, "reason": ""})
    assert "BREAK GLASS" not in row
    assert "FREEZE OVERRIDE" not in row
