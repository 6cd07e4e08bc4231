"""Rendering within Slack's limits (SPEC §4.6): a page of the list or the audit trail fits in
one message, hostile long names never push a cluster's id or project out, and fallbacks show
users as mentions."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.paging import AUDIT_PAGE_SIZE, LIST_PAGE_SIZE, Page
from bot.core.requests.view import RequestView
from bot.core.store import AuditEntry
from bot.providers.base import ClusterSummary
from bot.slack.render import answers, clusters, primitives, requests
from tests.support import limits

HOSTILE_NAME = ("<@U0EVIL> & <!channel> " * 200)[:4700]


def _cluster(cluster_id: str, name: str, project: str = "together-prod") -> ClusterSummary:
    return ClusterSummary(
        provider="together",
        project=project,
        cluster_id=cluster_id,
        name=name,
        status="Ready",
        steady=True,
        gpu_type="H100_SXM",
        size="16 GPUs",
    )


def assert_fits_one_message(message: primitives.SlackMessage) -> None:
    limits.assert_fits_one_message(message.as_kwargs()["text"], message.blocks)


def _page(total: int, number: int = 1, size: int = LIST_PAGE_SIZE) -> Page:
    count = max(1, -(-total // size))
    first = (number - 1) * size + 1
    return Page(
        number=number,
        count=count,
        first=first,
        last=min(total, number * size),
        total=total,
        noun="clusters",
        command="/gpu list together-prod",
    )


def test_a_full_page_of_long_hostile_names_in_forty_projects_fits_and_keeps_every_id() -> None:
    groups = {
        f"project-{i:02d}-{'x' * 100}": [_cluster(f"tc-{i:03d}", HOSTILE_NAME)]
        for i in range(LIST_PAGE_SIZE)
    }
    message = clusters.cluster_list(groups, _page(62))
    assert_fits_one_message(message)
    shown = json.dumps(message.blocks)
    for i in range(LIST_PAGE_SIZE):
        assert f"`tc-{i:03d}`" in shown and f"project-{i:02d}" in shown
    last = message.blocks[-1]["elements"][0]["text"]
    assert last == "clusters 1\u201340 of 62 · page 1 of 2 · next: /gpu list together-prod page=2"
    assert message.text.startswith(last)


def test_sixty_two_long_names_in_one_project_take_two_pages_that_each_fit() -> None:
    summaries = [_cluster(f"tc-{i:03d}", f"{i}-" + "n" * 300) for i in range(62)]
    first = clusters.cluster_list({"together-prod": summaries[:40]}, _page(62))
    second = clusters.cluster_list({"together-prod": summaries[40:]}, _page(62, 2))
    for message in (first, second):
        assert_fits_one_message(message)
    shown = json.dumps(first.blocks) + json.dumps(second.blocks)
    assert all(f"`tc-{i:03d}`" in shown for i in range(62))
    assert "clusters 41\u201362 of 62 · page 2 of 2" in second.text
    assert "next:" not in second.text


def test_a_page_past_the_end_says_so() -> None:
    page = Page(
        number=2,
        count=2,
        first=41,
        last=62,
        total=62,
        noun="clusters",
        command="/gpu list",
        asked=7,
    )
    message = clusters.cluster_list({"together-prod": [_cluster("tc-1", "a")]}, page)
    assert "there is no page 7: this answer has 2 pages; here is page 2." in message.text
    assert_fits_one_message(message)


def _entry(i: int, reason: str) -> AuditEntry:
    return AuditEntry(
        id=i,
        at=datetime(2026, 11, 30, tzinfo=UTC) - timedelta(minutes=i),
        actor="U05ERIN",
        event="requested",
        project="together-prod",
        cluster_id=f"tc-{i}",
        request_id=f"CR-{i:06d}",
        outcome="pending",
        detail={"reason": reason},
    )


@settings(max_examples=30, deadline=None)
@given(reason=st.text(alphabet="<>&@!|Ux: ", min_size=400, max_size=500))
def test_a_page_of_audit_entries_with_long_hostile_reasons_fits(reason: str) -> None:
    entries = [_entry(i, reason) for i in range(AUDIT_PAGE_SIZE)]
    message = answers.audit_list(entries, _page(100, size=AUDIT_PAGE_SIZE))
    assert_fits_one_message(message)
    shown = json.dumps(message.blocks)
    assert all(f"CR-{i:06d}" in shown for i in range(AUDIT_PAGE_SIZE))
    assert shown.count("<@U05ERIN>") == AUDIT_PAGE_SIZE  # the actor, a real mention
    assert "<@U05ERIN>" in message.text


def _request(**kw: object) -> RequestView:
    base: dict[str, Any] = dict(
        id="CR-ABC123",
        state="pending",
        provider="together",
        project="together-prod",
        cluster_id="tc-hostile",
        cluster_name=HOSTILE_NAME,
        action="update",
        preview=["num_gpus 8 → 16"],
        requester="U01ALICE",
        channel="C0INCIDENT",
        needs_approval=True,
    )
    base.update(kw)
    return RequestView(**base)


def test_a_4700_character_name_keeps_the_id_and_project_in_the_first_section() -> None:
    root = requests.request_root(_request(reason="<@U0EVIL> " * 50))
    first = root.blocks[0]["text"]["text"]
    assert first.endswith("(`tc-hostile`, together/together-prod)")
    assert "…*" in first and len(first) <= 3000
    assert_fits_one_message(root)
    assert root.text.startswith("[pending approval] <@U01ALICE> asks for update on ")
    assert "(tc-hostile, together/together-prod)" in root.text and "CR-ABC123" in root.text


def test_the_summary_header_and_fallback_keep_the_id() -> None:
    message = clusters.cluster_summary(
        _cluster("tc-hostile", HOSTILE_NAME), requested_by="U01ALICE"
    )
    header = message.blocks[0]["text"]["text"]
    assert header.endswith("… (tc-hostile)") and len(header) <= 150
    assert "(tc-hostile)" in message.text and "together/together-prod" in message.text
    assert_fits_one_message(message)
