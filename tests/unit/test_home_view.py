"""The Home view: approvals with their buttons, own open requests with Cancel, clusters with
Show, within Slack's limits (checked with slack_sdk's View model), escaped, never silently cut."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from slack_sdk.models.views import View

from bot.core.home import HomeCluster, HomeData, HomeProject, HomeRequest
from bot.local.slack.models import view_problems
from bot.slack.home import MAX_BLOCKS, NO_PROJECTS, SHOW_ACTION_ID, home_view

NOW = datetime(2026, 11, 30, 18, 0, tzinfo=UTC)


def request(rid: str, **changes: Any) -> HomeRequest:
    fields: dict[str, Any] = {
        "id": rid,
        "state": "pending",
        "provider": "e2e",
        "project": "e2e-delhi",
        "cluster_id": "101",
        "cluster_name": "train-h100-a",
        "action": "scale_cluster",
        "preview": ["scale_cluster: 2 → 4 nodes"],
        "requester": "U04DAVE",
        "channel": "C0INCIDENT",
        "updated_at": NOW,
    }
    return HomeRequest(**{**fields, **changes})


def cluster(index: int, **changes: Any) -> HomeCluster:
    fields: dict[str, Any] = {
        "cluster_id": str(100 + index),
        "name": f"train-{index}",
        "status": "Running",
        "steady": True,
        "size": "2 nodes",
        "gpu_type": "H100",
    }
    return HomeCluster(**{**fields, **changes})


def data(**changes: Any) -> HomeData:
    fields: dict[str, Any] = {
        "user": "U02BOB",
        "approvals": [],
        "approvals_total": 0,
        "open_requests": [],
        "open_total": 0,
        "recent": [],
        "recent_total": 0,
        "projects": [],
    }
    return HomeData(**{**fields, **changes})


def validated(view: dict[str, Any]) -> dict[str, Any]:
    View(**view).validate_json()  # raises on a block, text or length Slack would refuse
    assert view["type"] == "home" and len(view["blocks"]) <= MAX_BLOCKS
    assert view_problems(view, kind="home") == []  # and views.publish on the stand-in takes it
    return view


def buttons(view: dict[str, Any]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for block in view["blocks"]:
        elements = block.get("elements", []) if block["type"] == "actions" else []
        accessory = block.get("accessory")
        for element in [*elements, *([accessory] if accessory else [])]:
            if element.get("type") == "button":
                found.append((element["action_id"], element["value"]))
    return found


def text_of(view: dict[str, Any]) -> str:
    return json.dumps(view, ensure_ascii=False)


def test_an_approver_sees_the_pending_request_with_approve_and_deny() -> None:
    pending = request(
        "CR-ABC123", price_line="≈ +₹24.60/h: 2 more nodes at ₹12.30/h each, hourly plan"
    )
    view = validated(home_view(data(approvals=[pending], approvals_total=1)))
    assert ("approve_request", "CR-ABC123") in buttons(view)
    assert ("deny_request", "CR-ABC123") in buttons(view)
    text = text_of(view)
    assert "<@U04DAVE>" in text and "<#C0INCIDENT>" in text
    assert "≈ +₹24.60/h: 2 more nodes at ₹12.30/h each, hourly plan" in text


def test_own_pending_request_has_cancel_and_an_approved_one_does_not() -> None:
    mine = [request("CR-MINE01"), request("CR-MINE02", state="executing")]
    view = validated(home_view(data(user="U04DAVE", open_requests=mine, open_total=2)))
    assert buttons(view) == [("cancel_request", "CR-MINE01")]


def test_no_grant_shows_no_project_name() -> None:
    view = validated(home_view(data(user="U06MALLORY")))
    text = text_of(view)
    assert NO_PROJECTS in text
    assert "e2e-delhi" not in text and "together-prod" not in text
    assert buttons(view) == []


def test_each_cluster_has_a_show_button_with_project_and_cluster() -> None:
    project = HomeProject(name="e2e-delhi", provider="e2e", clusters=[cluster(1)], total_clusters=1)
    view = validated(home_view(data(projects=[project])))
    assert buttons(view) == [(SHOW_ACTION_ID, "e2e-delhi:101")]


def test_provider_and_user_text_is_escaped() -> None:
    nasty = "<!channel> <https://evil.example|click> & co"
    project = HomeProject(
        name="e2e-delhi",
        provider="e2e",
        clusters=[cluster(1, name=nasty, status=nasty)],
        total_clusters=1,
    )
    pending = request("CR-ESC001", reason=nasty, cluster_name=nasty, preview=[nasty])
    view = validated(home_view(data(approvals=[pending], approvals_total=1, projects=[project])))
    text = text_of(view)
    assert "<!channel>" not in text and "<https://evil" not in text
    assert "&lt;!channel&gt;" in text


def test_overflow_is_counted_and_says_where_to_see_the_rest() -> None:
    approvals = [request(f"CR-A{i:05d}") for i in range(10)]
    opened = [request(f"CR-O{i:05d}", requester="U02BOB") for i in range(10)]
    recent = [
        request(f"CR-R{i:05d}", state="succeeded", result_message="done " * 100) for i in range(5)
    ]
    projects = [
        HomeProject(
            name=f"proj-{p}",
            provider="e2e",
            clusters=[cluster(i) for i in range(10)],
            total_clusters=37,
        )
        for p in range(12)
    ]
    view = validated(
        home_view(
            data(
                approvals=approvals,
                approvals_total=25,
                approval_channels=["C0INCIDENT", "C0RANDOM"],
                open_requests=opened,
                open_total=14,
                recent=recent,
                recent_total=40,
                projects=projects,
            )
        )
    )
    text = text_of(view)
    assert len(view["blocks"]) <= MAX_BLOCKS
    assert "15 more not shown here" in text and "<#C0RANDOM>" in text
    assert "4 more not shown here" in text
    assert "35 more not shown here" in text and "`/gpu audit`" in text
    assert "27 more not shown here — see them all with `/gpu list proj-0`" in text
    # the projects that did not fit at all are named with the command that shows them
    assert "more projects not shown here" in text and "`proj-11`" in text
    shown_projects = [p for p in range(12) if f"*proj-{p}* (e2e)" in text]
    missing = [p for p in range(12) if p not in shown_projects]
    assert missing and all(f"`proj-{p}`" in text for p in missing)


def test_a_project_whose_provider_failed_says_so() -> None:
    project = HomeProject(
        name="together-prod",
        provider="together",
        clusters=[],
        total_clusters=0,
        error="Together timed out",
    )
    view = validated(home_view(data(projects=[project])))
    assert "Together timed out" in text_of(view)


def test_long_texts_stay_within_section_limits() -> None:
    huge = request("CR-HUGE01", reason="r" * 5000, preview=["p" * 1000] * 5)
    view = validated(home_view(data(approvals=[huge], approvals_total=1)))
    for block in view["blocks"]:
        if block["type"] == "section" and "text" in block:
            assert len(block["text"]["text"]) <= 3000


@settings(max_examples=60, deadline=None)
@given(
    approvals=st.integers(min_value=0, max_value=15),
    opened=st.integers(min_value=0, max_value=15),
    recent=st.integers(min_value=0, max_value=8),
    projects=st.lists(st.integers(min_value=0, max_value=15), max_size=15),
)
def test_any_amount_of_content_fits_and_every_project_is_shown_or_named(
    approvals: int, opened: int, recent: int, projects: list[int]
) -> None:
    home = data(
        approvals=[request(f"CR-A{i:05d}") for i in range(approvals)],  # more than it shows
        approvals_total=approvals,
        open_requests=[request(f"CR-O{i:05d}") for i in range(opened)],
        open_total=opened,
        recent=[request(f"CR-R{i:05d}", state="failed") for i in range(min(recent, 5))],
        recent_total=recent,
        projects=[
            HomeProject(
                name=f"proj-{p}",
                provider="together",
                clusters=[cluster(i) for i in range(min(count, 10))],
                total_clusters=count,
            )
            for p, count in enumerate(projects)
        ],
    )
    view = validated(home_view(home))
    text = text_of(view)
    approve = [value for action, value in buttons(view) if action == "approve_request"]
    assert approve == [f"CR-A{i:05d}" for i in range(len(approve))] and approvals >= len(approve)
    if len(approve) < approvals:
        assert f"{approvals - len(approve)} more not shown here" in text
    for p, count in enumerate(projects):
        assert f"*proj-{p}* (together)" in text or f"`proj-{p}`" in text
        shown = sum(1 for action, value in buttons(view) if value.startswith(f"proj-{p}:"))
        if f"*proj-{p}* (together)" in text and shown < count:
            assert f"{count - shown} more not shown here" in text
