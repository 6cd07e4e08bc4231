"""Paging, not cutting (SPEC §4.6), over real HTTP: signed `/gpu list … page=N` and `/gpu audit
… page=N` into the bot, the simulators behind it, the stand-in's response URLs in front. Every
cluster of 32 projects and every audit entry is reachable page by page; each page fits in one
message; a 4,700-character cluster name keeps the request's id and project in sight."""

from __future__ import annotations

import copy
import re
from typing import Any

from bot.local.demo.stack import DEMO_POLICY, LocalStack
from bot.local.slack.models import Ephemeral
from tests.conftest import StackFactory
from tests.support.limits import assert_fits_one_message
from tests.support.slack_support import (
    blocks_json,
    provider_writes,
    roots,
    whisper,
)

TEAMS = [f"team-{i:02d}" for i in range(30)]  # with together-prod and e2e-delhi: 32 projects
LONG_NAME = "train & eval <{i}> " + "x" * 220
HOSTILE_NAME = ("<@U0EVIL> & <!channel> " * 200)[:4700]
_NEXT = re.compile(r"next: /gpu (\S+(?: \S+)*)$")
_LISTED_ID = re.compile(r"• `([^`]+)`")


def _policy() -> str:
    teams = "".join(
        f"  {team}:\n    provider: together\n    api_key_env: TOGETHER_API_KEY\n"
        f"    project_id: proj-{team}\n"
        for team in TEAMS
    )
    return DEMO_POLICY.replace("projects:\n", f"projects:\n{teams}", 1)


def _add_cluster(stack: LocalStack, cluster_id: str, name: str, project_id: str) -> None:
    """A copy of a seeded Together cluster under another id, name and project."""
    cluster = copy.deepcopy(stack.together.clusters["tc-h200-ondemand"])
    cluster.update(cluster_id=cluster_id, cluster_name=name, project_id=project_id)
    cluster.update(ums_project_id=project_id)
    stack.together.clusters[cluster_id] = cluster


async def _paged_stack(make_stack: StackFactory) -> tuple[LocalStack, set[str]]:
    stack = await make_stack(policy_yaml=_policy())
    for i in range(62):
        _add_cluster(stack, f"tc-long-{i:02d}", LONG_NAME.format(i=i), "proj-123")
    for team in TEAMS:
        for j in range(2):
            _add_cluster(stack, f"tc-{team}-{j}", LONG_NAME.format(i=team), f"proj-{team}")
    expected = {c for c, v in stack.together.clusters.items() if v["project_id"] != "proj-999"}
    expected |= {str(c) for c in range(101, 107)}  # e2e-delhi's six clusters
    return stack, expected


def _page_line(answer: Ephemeral) -> str:
    last = (answer.blocks or [])[-1]
    assert last["type"] == "context", last
    text: str = last["elements"][0]["text"]
    return text


async def _page_through(stack: LocalStack, user: str, command: str) -> list[Ephemeral]:
    """Send ``command``, then each page's ``next:`` command until the last page."""
    answers: list[Ephemeral] = []
    while True:
        answer = await whisper(stack, user, "C0INCIDENT", command)
        assert_fits_one_message(answer.text, answer.blocks)
        answers.append(answer)
        following = _NEXT.search(_page_line(answer))
        if following is None:
            return answers
        command = following.group(1)
        assert len(answers) < 20, "paging does not end"


def _listed(answers: list[Ephemeral]) -> list[str]:
    return [
        found
        for answer in answers
        for block in answer.blocks or []
        if block["type"] == "section"
        for found in _LISTED_ID.findall(block["text"]["text"])
    ]


async def test_every_cluster_of_32_projects_is_reachable_by_paging(
    make_stack: StackFactory,
) -> None:
    stack, expected = await _paged_stack(make_stack)
    answers = await _page_through(stack, "U01ALICE", "list")
    listed = _listed(answers)
    assert sorted(listed) == sorted(expected)  # each once, none missing
    assert len(answers) == -(-len(expected) // 40)
    shown = "".join(blocks_json(a.blocks) for a in answers)
    for project in ["together-prod", "e2e-delhi", *TEAMS]:
        assert f"*{project}*" in shown, project
    assert _page_line(answers[0]) == (
        f"clusters 1\u201340 of {len(expected)} · page 1 of {len(answers)} · next: /gpu list page=2"
    )
    assert "next:" not in _page_line(answers[-1])
    assert "train &amp; eval &lt;0&gt; xxx" in shown  # escaped, not cut mid-escape

    past = await whisper(stack, "U01ALICE", "C0INCIDENT", "list page=99")
    assert f"there is no page 99: this answer has {len(answers)} pages" in past.text
    assert _listed([past]) == _listed(answers[-1:])


async def test_one_project_of_62_long_named_clusters_pages_by_its_own_command(
    make_stack: StackFactory,
) -> None:
    stack, _ = await _paged_stack(make_stack)
    answers = await _page_through(stack, "U04DAVE", "list together-prod")
    listed = _listed(answers)
    in_project = {c for c, v in stack.together.clusters.items() if v["project_id"] == "proj-123"}
    assert sorted(listed) == sorted(in_project)
    total = len(in_project)
    assert total == 62 + 5  # the seeded five and the long-named 62
    assert _page_line(answers[0]) == (
        f"clusters 1\u201340 of {total} · page 1 of 2 · next: /gpu list together-prod page=2"
    )
    assert _page_line(answers[1]) == f"clusters 41\u2013{total} of {total} · page 2 of 2"

    wrong = await whisper(stack, "U04DAVE", "C0INCIDENT", "list together-prod page=0")
    assert "`page=0` is not a page: give a whole number from 1, such as `page=2`" in wrong.text


async def test_audit_100_pages_through_every_entry(stack: LocalStack) -> None:
    store = stack.runtime.store
    for i in range(130):
        await store.append_audit(
            actor="U04DAVE",
            event="requested",
            project="together-prod",
            cluster_id="tc-h100-reserved",
            request_id=f"CR-{i:06d}",
            outcome="pending",
            detail={"reason": f"<@U0EVIL> {i} " + "&<" * 245},
        )
    answers = await _page_through(stack, "U01ALICE", "audit 100")
    assert len(answers) == 5
    shown = [re.findall(r"`(CR-\d{6})`", blocks_json(a.blocks)) for a in answers]
    assert [len(ids) for ids in shown] == [20] * 5
    assert [i for ids in shown for i in ids] == [f"CR-{i:06d}" for i in range(129, 29, -1)]
    assert _page_line(answers[0]) == (
        "entries 1\u201320 of the newest 100 (130 in all) · page 1 of 5 · "
        "next: /gpu audit 100 page=2"
    )
    assert (
        _page_line(answers[4]) == "entries 81\u2013100 of the newest 100 (130 in all) · page 5 of 5"
    )
    [newest] = await store.list_audit(limit=1)  # each entry shows its place in the chain
    assert f"`#{newest.short_hash}`" in blocks_json(answers[0].blocks)
    assert len(re.findall(r"`#[0-9a-f]{10}`", blocks_json(answers[4].blocks))) == 20
    for answer in answers:
        assert "<@U04DAVE>" in answer.text and "U04DAVE" not in answer.text.replace(
            "<@U04DAVE>", ""
        )

    scoped = await _page_through(stack, "U01ALICE", "audit together-prod 30 page=2")
    assert _page_line(scoped[0]) == (
        "entries 21\u201330 of the newest 30 (130 in all) · page 2 of 2 · "
        "more: /gpu audit together-prod 100"
    )


async def test_audit_says_the_real_total_when_only_the_newest_were_asked_for(
    stack: LocalStack,
) -> None:
    for i in range(25):
        await stack.runtime.store.append_audit(
            actor="U04DAVE", event="requested", project="e2e-delhi", request_id=f"CR-{i:06d}"
        )
    [answer] = await _page_through(stack, "U01ALICE", "audit")
    assert _page_line(answer) == (
        "entries 1\u201320 of the newest 20 (25 in all) · more: /gpu audit 25"
    )
    first, second = await _page_through(stack, "U01ALICE", "audit 25")
    assert _page_line(second) == "entries 21\u201325 of 25 · page 2 of 2"
    assert _page_line(first) == "entries 1\u201320 of 25 · page 1 of 2 · next: /gpu audit 25 page=2"


async def test_a_4700_character_name_keeps_id_and_project_in_the_request(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    _add_cluster(stack, "tc-hostile", HOSTILE_NAME, "proj-123")
    await whisper(stack, "U04DAVE", "C0INCIDENT", "list together-prod")
    result = await stack.sender.command(
        "U04DAVE", "C0INCIDENT", "update together-prod tc-hostile num_gpus=16"
    )
    assert result.status == 200 and result.acked_in_time
    root = await stack.slack.wait_for(lambda: next(iter(roots(stack, "C0INCIDENT")), None))
    assert_fits_one_message(root.text, root.blocks)
    first: dict[str, Any] = (root.blocks or [])[0]
    assert first["text"]["text"].endswith("(`tc-hostile`, together/together-prod)")
    assert re.match(r"\[[a-z ]+\] <@U04DAVE> asks for update on &lt;@U0EVIL&gt;", root.text)
    assert "(tc-hostile, together/together-prod)" in root.text

    await stack.sender.command("U04DAVE", "C0INCIDENT", "show together-prod tc-hostile")
    shown = await stack.slack.wait_for(
        lambda: next((m for m in roots(stack, "C0INCIDENT") if m is not root), None)
    )
    assert_fits_one_message(shown.text, shown.blocks)
    header = (shown.blocks or [])[0]
    assert header["type"] == "header" and header["text"]["text"].endswith("… (tc-hostile)")


async def test_a_reason_over_500_characters_is_refused_with_the_limit(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    reason = "<@U0EVIL> " + "r" * 495
    answer = await whisper(
        stack,
        "U04DAVE",
        "C0INCIDENT",
        f'update together-prod tc-h100-reserved num_gpus=24 reason="{reason}"',
    )
    assert "a reason may be at most 500 characters; yours has 505" in answer.text
    assert roots(stack, "C0INCIDENT") == [] and provider_writes(stack) == []
