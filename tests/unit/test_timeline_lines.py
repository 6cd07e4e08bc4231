"""One timeline line per kind of event (SPEC §10), user text inert, and the entries that are
not the channel's story left out."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from bot.core.store import AuditEntry
from bot.core.store.timeline import REQUEST_EVENTS, WATCH_EVENTS, ChannelEvent
from bot.core.timeline_lines import event_line, md

AT = datetime(2026, 12, 1, 9, 21, 4, tzinfo=UTC)


def _together(project: str | None) -> str:
    """The demo's remediations are Together's (the provider that has them)."""
    return "Together"


def event(event_name: str, *, request: bool = True, **fields: Any) -> ChannelEvent:
    entry = AuditEntry(
        id=7,
        at=AT,
        actor=fields.pop("actor", "U02BOB"),
        event=event_name,
        project="e2e-delhi",
        cluster_id="101",
        request_id="CR-PFXSA6" if request else None,
        outcome=fields.pop("outcome", None),
        detail=fields.pop("detail", {}),
        hash="ab" * 32,
    )
    return ChannelEvent(entry, cluster_name="train-h100-a" if request else None, action="scale")


@pytest.mark.parametrize(
    ("made", "expected"),
    [
        (event("denied"), "**CR-PFXSA6** denied by @U02BOB"),
        (
            event("denied", detail={"reason": "not during the eval run"}),
            "**CR-PFXSA6** denied by @U02BOB · reason: not during the eval run",
        ),
        (
            event("cancelled", actor="U04DAVE", detail={"reason": "wrong cluster"}),
            "**CR-PFXSA6** cancelled by @U04DAVE · reason: wrong cluster",
        ),
        (
            event(
                "freeze_override",
                actor="U01ALICE",
                outcome="quarter-end",
                detail={"reason": "sev1: the eval cluster is down", "until": "2026-12-02"},
            ),
            "**CR-PFXSA6** freeze override by @U01ALICE: quarter-end (until 2026-12-02)"
            " · justification: sev1: the eval cluster is down",
        ),
        (
            event(
                "requested",
                actor="U04DAVE",
                detail={"run_at": "2026-12-01T22:00:00+00:00", "reason": "off-peak"},
            ),
            "**CR-PFXSA6** requested by @U04DAVE: scale on train-h100-a (101, e2e-delhi)"
            " · scheduled for 2026-12-01T22:00:00+00:00 · reason: off-peak",
        ),
        (
            event("approval_added", outcome="1 of 2"),
            "**CR-PFXSA6** approved by @U02BOB (1 of 2): not yet enough",
        ),
        (
            event("approval_rule_changed", actor="gpuops", outcome="1 of 2"),
            "**CR-PFXSA6** approval rule changed by a policy reload: 1 of 2 approvals",
        ),
        (event("cancelled", actor="U04DAVE"), "**CR-PFXSA6** cancelled by @U04DAVE"),
        (event("expired", actor="gpuops"), "**CR-PFXSA6** expired: nobody decided in time"),
        (
            event("withdrawn", detail={"reason": "the root post failed"}),
            "**CR-PFXSA6** withdrawn: the root post failed",
        ),
        (
            event("approved", detail={"break_glass": True, "reason": "sev1"}),
            "**CR-PFXSA6** approved by @U02BOB (break glass: their own request) · reason: sev1",
        ),
        (
            event("break_glass", outcome="1 of 2", detail={"break_glass": True, "reason": "sev1"}),
            "**CR-PFXSA6** break glass by @U02BOB: their own request, one approval (1 of 2)"
            " · reason: sev1",
        ),
        (
            event("refused", outcome="stale", detail={"reason": "the cluster changed"}),
            "**CR-PFXSA6** failed before it was sent (stale): the cluster changed",
        ),
        (
            event("result", outcome="unknown", detail={"reason": "interrupted"}),
            "**CR-PFXSA6** final state **unknown**: interrupted",
        ),
        (
            event(
                "health_alert",
                request=False,
                outcome="opened",
                detail={"status": "Degraded", "previous_status": "Running"},
            ),
            "health alert: 101 (e2e-delhi) went Running → Degraded",
        ),
        (
            event("health_alert", request=False, outcome="recovered", detail={"status": "Running"}),
            "health: 101 (e2e-delhi) is Running again",
        ),
        (
            event(
                "reservation_reminder",
                request=False,
                detail={"horizon": "24h", "reservation_end_time": "2026-12-02T09:00:00+00:00"},
            ),
            "reminder: the reservation of 101 (e2e-delhi) ends 2026-12-02T09:00:00+00:00 (24h)",
        ),
        (
            event("remediation_decided_elsewhere", request=False, outcome="AUTO_RESOLVED"),
            "remediation on 101 (e2e-delhi) decided at Together: AUTO\\_RESOLVED",
        ),
        (
            event(
                "remediation_reject",
                request=False,
                outcome="rejected",
                detail={"node": "node-3", "detail": "flaky"},
            ),
            "remediation of node node-3 of 101 (e2e-delhi): rejection by @U02BOB"
            " — rejected (flaky)",
        ),
    ],
)
def test_each_kind_of_event_has_its_line(made: ChannelEvent, expected: str) -> None:
    assert event_line(made, _together) == f"2026-12-01 09:21:04Z · {expected} · `#{'ab' * 5}`"


def test_every_listed_event_has_a_line() -> None:
    for name in REQUEST_EVENTS:
        assert (
            event_line(event(name, outcome="x", detail={"reason": "r"}), _together) is not None
        ), name
    for name in WATCH_EVENTS:
        assert event_line(event(name, request=False, outcome="x"), _together) is not None, name


def test_a_refused_click_or_command_is_not_the_channels_story() -> None:
    click = event("refused", outcome="not_authorized", detail={"reason": "no", "command": ""})
    assert event_line(click, _together) is None


def test_user_text_is_one_inert_line() -> None:
    assert md("line one\n- [x](https://evil) <b>*bold*</b> `code` # h") == (
        "line one - \\[x\\](https://evil) \\<b\\>\\*bold\\*\\</b\\> \\`code\\` \\# h"
    )
    assert md("x" * 700).endswith("…") and len(md("x" * 700)) == 600
