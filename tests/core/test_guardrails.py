"""Fleet guardrails on the core harness (SPEC §8): limits at request and at approval, the
hourly price limit, N-approver rules with user groups, a reload that takes an approver's
grant, and freezes (refusal, admin override, begun after the request, weekly windows)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.core.store import RequestState as S
from bot.local.demo.stack import DEMO_POLICY
from tests.core.conftest import CoreFactory
from tests.support.core_harness import ALICE, BOB, CAROL, DAVE, Core, reply_text
from tests.support.guard_kit import absolute_freeze, guard_policy

DECOMMISSION = {"reservation_end_time": "2027-06-30T00:00:00Z"}
SCALE = "action e2e-delhi 101 scale_cluster additional_nodes=2"


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (
            "update together-prod tc-h200-ondemand num_gpus=128",
            "num_gpus 128 is over together-prod's limit of 64 GPUs per cluster",
        ),
        (
            "action e2e-delhi 101 scale_cluster additional_nodes=8",
            "10 nodes is over e2e-delhi's limit of 6 nodes per cluster",
        ),
        (
            "update together-prod tc-b200-pool num_gpus=40",
            "no price for GPU type B200_SXM",
        ),
        (
            "update together-prod tc-h200-ondemand num_gpus=40",
            "≈ +$121.28/h is over together-prod's limit of +$100.00/h per change",
        ),
    ],
)
async def test_a_change_past_a_limit_is_refused_and_nothing_is_stored(
    make_core: CoreFactory, command: str, says: str
) -> None:
    core = await make_core(policy_yaml=guard_policy())
    assert says in await core.answer(DAVE, command)
    assert await core.store.list_requests() == []
    assert core.together.script.of("apply") == [] and core.e2e.script.of("apply") == []
    [refused] = await core.store.list_audit(limit=5)
    assert (refused.event, refused.outcome) == ("refused", "limit")


async def test_an_unpriced_scale_up_cannot_be_checked_against_the_price_limit(
    make_core: CoreFactory,
) -> None:
    core = await make_core(policy_yaml=guard_policy())
    text = await core.answer(DAVE, "update together-prod tc-b200-pool num_gpus=40")
    assert "no price for GPU type B200_SXM" in text and "cannot be checked" in text


async def test_a_change_within_the_limits_is_opened_with_its_price(make_core: CoreFactory) -> None:
    core = await make_core(policy_yaml=guard_policy())
    opened = await core.open(DAVE, "together-prod", "tc-h100-reserved", "update", {"num_gpus": "8"})
    record = await core.record(opened.id)
    assert record.state is S.PENDING
    size = record.plan["guard"]["size"]
    assert (size["gpu_type"], size["gpus_before"], size["gpus_after"]) == ("H100_SXM", 16, 8)
    assert float(size["hourly"]) == pytest.approx(-23.92)
    line = "≈ -$23.92/h: 8 \N{MULTIPLICATION SIGN} H100_SXM at $2.99, prices of "
    assert size["price_line"].startswith(line) and "old" not in size["price_line"]


async def test_a_stricter_policy_refuses_at_approval_what_a_looser_one_allowed(
    any_core: Core,
) -> None:
    core = any_core
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "2"})
    strict = DEMO_POLICY.replace(
        "    location: Delhi\n", "    location: Delhi\n    limits:\n      max_nodes: 3\n"
    )
    core.reload(strict)
    told = reply_text(await core.approve(BOB, opened.id))
    assert "limit of 3 nodes" in told
    record = await core.record(opened.id)
    assert record.state is S.FAILED and record.result_message is not None
    assert "4 nodes is over e2e-delhi's limit of 3 nodes" in record.result_message
    assert core.e2e.script.of("apply") == []


async def test_two_distinct_approvers_are_needed_and_each_is_told_how_far(
    make_core: CoreFactory, database_url: str
) -> None:
    core = await make_core(policy_yaml=guard_policy(), database_url=database_url)
    opened = await core.open(DAVE, "together-prod", "tc-h100-reserved", "update", DECOMMISSION)
    record = await core.record(opened.id)
    assert record.approvals is not None and record.approvals["needed"] == 2
    assert record.approvals["by_rule"] and record.approvals["by"] == []

    told = reply_text(await core.approve(BOB, opened.id))
    assert f"Your approval of {opened.id} is recorded: 1 of 2." in told
    [added] = core.notifier.of(opened.id, "request_changed")
    assert added.kind == "approval_added" and added.actor == BOB and added.state is S.PENDING
    again = reply_text(await core.approve(BOB, opened.id))  # the same person counts once
    assert "already approved" in again and "1 of 2" in again
    record = await core.record(opened.id)
    assert record.state is S.PENDING and record.approvers == [BOB]
    assert core.together.script.of("apply") == []

    assert await core.approve(CAROL, opened.id) is None
    record = await core.record(opened.id)
    assert record.state is S.SUCCEEDED and record.approvers == [BOB, CAROL]
    assert len(core.together.script.of("apply")) == 1
    trail = await core.events(opened.id)
    assert trail.count("approval_added") == 1 and trail.count("approved") == 1


async def test_an_approver_outside_the_rules_groups_is_refused_and_nothing_is_recorded(
    make_core: CoreFactory, database_url: str
) -> None:
    core = await make_core(policy_yaml=guard_policy(), database_url=database_url)
    opened = await core.open(DAVE, "e2e-delhi", "101", "restart_cluster")
    record = await core.record(opened.id)
    assert record.approvals is not None and record.approvals["usergroups"] == ["S0PLATFORM"]
    told = reply_text(await core.approve(BOB, opened.id))
    assert "you must be in" in told and "nothing was recorded" in told
    denied = await core.ops.may_deny(user=BOB, channel="C0INCIDENT", request_id=opened.id)
    assert denied is not None and "nothing was recorded" in reply_text(denied)
    assert reply_text(await core.deny(BOB, opened.id)).count("nothing was recorded") == 1
    record = await core.record(opened.id)
    assert record.state is S.PENDING and record.approvers == []
    assert await core.approve(CAROL, opened.id) is None  # in S0PLATFORM: one is enough here
    assert (await core.record(opened.id)).state is S.SUCCEEDED
    assert len(core.e2e.script.of("apply")) == 1


async def test_one_eligible_deny_ends_a_request_that_had_an_approval(
    make_core: CoreFactory,
) -> None:
    core = await make_core(policy_yaml=guard_policy())
    opened = await core.open(DAVE, "together-prod", "tc-h100-reserved", "update", DECOMMISSION)
    await core.approve(BOB, opened.id)
    assert await core.deny(ALICE, opened.id) is None
    record = await core.record(opened.id)
    assert record.state is S.DENIED and record.decided_by == ALICE
    assert core.together.script.of("apply") == []


async def test_an_approval_stops_counting_when_a_reload_takes_the_approvers_grant(
    make_core: CoreFactory,
) -> None:
    core = await make_core(policy_yaml=guard_policy())
    opened = await core.open(DAVE, "together-prod", "tc-h100-reserved", "update", DECOMMISSION)
    await core.approve(BOB, opened.id)
    bob_grant = '  - users: [U02BOB]\n    projects: ["*"]\n    role: approver\n'
    core.reload(guard_policy().replace(bob_grant, ""))
    told = reply_text(await core.approve(CAROL, opened.id))
    assert "recorded: 1 of 2" in told  # Bob's approval no longer counts
    record = await core.record(opened.id)
    assert record.state is S.PENDING and record.approvers == [BOB, CAROL]
    assert core.together.script.of("apply") == []
    assert await core.approve(ALICE, opened.id) is None
    assert (await core.record(opened.id)).state is S.SUCCEEDED
    assert len(core.together.script.of("apply")) == 1


# -- freezes ------------------------------------------------------------------------------


async def frozen(make_core: CoreFactory, start: timedelta, end: timedelta, **kw: object) -> Core:
    now = datetime.now(UTC).replace(microsecond=0)
    freeze = absolute_freeze("year-end", now + start, now + end)
    return await make_core(policy_yaml=guard_policy(freeze), start=now, **kw)


async def test_a_change_during_a_freeze_is_refused_with_the_freeze_and_its_end(
    make_core: CoreFactory,
) -> None:
    core = await frozen(make_core, timedelta(hours=-1), timedelta(days=1))
    until = (core.clock.now + timedelta(days=1)).strftime("%Y-%m-%d %H:%M UTC")
    text = await core.answer(DAVE, SCALE)
    assert f"e2e-delhi is frozen (year-end) until {until}" in text
    assert 'An admin may add override="why"' in text
    assert "overriding a freeze needs admin" in await core.answer(
        DAVE, f'{SCALE} override="please, it is urgent"'
    )
    assert await core.store.list_requests() == []
    assert [e.outcome for e in await core.store.list_audit(limit=5)] == ["not_authorized", "frozen"]


async def test_an_admins_override_goes_through_approval_audited_and_announced(
    make_core: CoreFactory, database_url: str
) -> None:
    core = await frozen(
        make_core, timedelta(hours=-1), timedelta(days=1), database_url=database_url
    )
    reason = "incident 42 needs capacity"
    opened = await core.open(
        ALICE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "2"}, override=reason
    )
    record = await core.record(opened.id)
    assert record.state is S.PENDING
    announced = [m for m in core.notifier.mirrors(opened.id) if m.startswith("Freeze override")]
    assert len(announced) == 1 and "overrode year-end" in announced[0] and reason in announced[0]
    assert await core.approve(BOB, opened.id) is None
    assert (await core.record(opened.id)).state is S.SUCCEEDED
    assert len(core.e2e.script.of("apply")) == 1
    assert (ALICE, "freeze_override", "year-end") in await core.trail(opened.id)


async def test_a_freeze_that_began_after_the_request_stops_it_at_approval(
    make_core: CoreFactory, database_url: str
) -> None:
    core = await frozen(
        make_core, timedelta(minutes=10), timedelta(days=1), database_url=database_url
    )
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "2"})
    core.clock.advance(minutes=20)
    await core.approve(BOB, opened.id)
    record = await core.record(opened.id)
    assert record.state is S.FAILED and record.result_message is not None
    assert "frozen (year-end)" in record.result_message
    assert core.e2e.script.of("apply") == []


async def test_a_request_approved_before_a_freeze_is_refused_at_sending(
    make_core: CoreFactory, database_url: str
) -> None:
    core = await frozen(
        make_core, timedelta(minutes=10), timedelta(days=1), database_url=database_url
    )
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "2"})
    # approved before the freeze; its sending was delayed (its replica stopped, say)
    assert await core.store.transition(
        opened.id, from_states={S.PENDING}, to=S.APPROVED, decided_by=BOB
    )
    core.clock.advance(minutes=20)
    assert await core.workflow.execute(opened.id, actor=BOB) is None
    record = await core.record(opened.id)
    assert record.state is S.FAILED and record.result_message is not None
    assert record.result_message.startswith("not sent: e2e-delhi is frozen (year-end)")
    assert (await core.trail(opened.id))[-1] == ("gpuops", "refused", "frozen")
    assert core.e2e.script.of("apply") == []


async def test_a_weekly_freeze_holds_in_its_time_zone(make_core: CoreFactory) -> None:
    weekend = (
        "  - name: weekend\n    projects: [e2e-delhi]\n"
        '    weekly: {days: [sat, sun], from: "00:00", to: "24:00", timezone: Europe/Berlin}\n'
    )
    # Saturday 2026-12-05 00:30 in Berlin is Friday 23:30 UTC; the weekend ends Sunday 23:00 UTC
    core = await make_core(
        policy_yaml=guard_policy(weekend), start=datetime(2026, 12, 4, 23, 30, tzinfo=UTC)
    )
    text = await core.answer(DAVE, SCALE)
    assert "e2e-delhi is frozen (weekend) until 2026-12-06 23:00 UTC" in text
    core.clock.now = datetime(2026, 12, 4, 22, 30, tzinfo=UTC)  # Friday 23:30 in Berlin
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "2"})
    assert (await core.record(opened.id)).state is S.PENDING
    assert "approval_requested" in core.notifier.methods(opened.id)


async def test_a_freeze_on_another_project_leaves_this_one_alone(make_core: CoreFactory) -> None:
    now = datetime.now(UTC)
    freeze = absolute_freeze(
        "prod-only", now - timedelta(hours=1), now + timedelta(days=1), "[together-prod]"
    )
    core = await make_core(policy_yaml=guard_policy(freeze), start=now)
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "2"})
    assert (await core.record(opened.id)).state is S.PENDING
    assert "together-prod is frozen (prod-only)" in await core.answer(
        DAVE, "update together-prod tc-h200-ondemand num_gpus=16"
    )
