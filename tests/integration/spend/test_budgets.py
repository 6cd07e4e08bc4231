"""Budgets and team quotas over real HTTP (SPEC §13): a change whose projected month-end
spend passes ``deny_at`` is refused at request with the figures; an admin's override goes
through, audited as ``budget_override`` and announced in the notify channel; a price table
raised between request and approval refuses it just before sending; a team's GPU quota
holds across its Together and E2E projects."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from bot.core.spend.book import team_scope
from bot.core.spend.months import month_at
from bot.core.store import RequestState
from bot.local.demo.stack import LocalStack
from bot.metrics import REGISTRY
from tests.conftest import StackFactory
from tests.support.guard_kit import answer_to
from tests.support.spend_kit import PRICES, TOGETHER, spend_policy
from tests.support.watch_kit import NOTIFY, until, watched_stack
from tests.support.workflow_kit import ALICE, BOB, DAVE, click, readable_text, request, wait_state

RATE = Decimal("325.92")  # together-prod's clusters now, at the test's price table
CLUSTER = "tc-h100-reserved"  # 16 H100_SXM


def half_spent_budget() -> str:
    """A budget that the fleet's rate now projects to 50% of by the month's end."""
    now = datetime.now(UTC)
    monthly = (2 * RATE * month_at(now, "UTC").hours_left(now)).quantize(Decimal(1))
    return f"{{monthly_usd: {monthly}, warn_at: [40], deny_at: 100}}"


async def test_past_deny_at_a_change_is_refused_and_an_admin_may_override(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(policy_yaml=spend_policy(half_spent_budget()))
    # +120 H100 at $2.99: $358.80/h more, about 105% of the budget by the month's end
    text = await answer_to(stack, DAVE, f"update {TOGETHER} {CLUSTER} num_gpus=136")
    assert "over budget: together-prod: projected month-end $" in text, text
    assert "$684.72/h x " in text and 'An admin may add override="why"' in text, text
    assert stack.together.calls("update") == []
    text = await answer_to(
        stack,
        ALICE,
        f'update {TOGETHER} {CLUSTER} num_gpus=136 override="incident 42 needs the capacity"',
    )
    assert "ran" in text, text
    events = await stack.runtime.store.list_audit(limit=100)
    (override,) = [e for e in events if e.event == "budget_override"]
    assert override.actor == ALICE and override.detail["reason"].startswith("incident 42")
    announced = [readable_text(m) for m in stack.slack.messages.get(NOTIFY, [])]
    assert any("Budget override" in t and "incident 42" in t for t in announced), announced
    # Below the bands: no refusal, nothing said of budgets
    text = await answer_to(stack, DAVE, f"update {TOGETHER} tc-h200-ondemand num_gpus=8")
    assert "over budget" not in text


def approvals_policy(budget: str) -> str:
    """Scaling up together-prod needs one approval (so its requests wait in a thread)."""
    return spend_policy(budget).replace(PRICES, PRICES + "    require_approval: [scale_up]\n", 1)


def dearer(policy: str) -> str:
    return policy.replace("H100_SXM: 2.99", "H100_SXM: 29.90")


async def reload(stack: LocalStack, policy: str) -> None:
    stack.runtime.settings.gpuops_policy.write_text(policy)
    assert await stack.runtime.reload_policy() == "reloaded"


async def test_past_approval_at_a_change_needs_one_more_approver_named_with_the_figures(
    make_stack: StackFactory,
) -> None:
    budget = half_spent_budget().replace("deny_at: 100", "approval_at: 55, deny_at: 100")
    stack = await make_stack(policy_yaml=approvals_policy(budget))
    # +24 H100: $71.76/h more, about 61% of the budget by the month's end
    opened = await request(stack, DAVE, f"update {TOGETHER} {CLUSTER} num_gpus=40")

    def prompt_text() -> str:
        prompt = stack.slack.message(opened.channel, opened.prompt_ts or "")
        return "" if prompt is None else readable_text(prompt)

    shown = prompt_text()
    assert "needs 2 approvers" in shown, shown
    assert "one more past the budget's approval_at: together-prod: projected month-end $" in shown
    await click(stack, opened, BOB)
    await stack.slack.wait_for(lambda: "1 of 2" in prompt_text())
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is RequestState.PENDING
    await click(stack, opened, ALICE)
    await wait_state(stack.runtime.store, opened.id, RequestState.SUCCEEDED)
    assert len(stack.together.calls("update")) == 1


async def test_a_price_table_raised_before_approval_refuses_it_at_approval(
    make_stack: StackFactory,
) -> None:
    policy = approvals_policy(half_spent_budget())
    stack = await make_stack(policy_yaml=policy)
    opened = await request(stack, DAVE, f"update {TOGETHER} {CLUSTER} num_gpus=24")
    await reload(stack, dearer(policy))
    await click(stack, opened, BOB)
    record = await wait_state(stack.runtime.store, opened.id, RequestState.FAILED)
    assert record.result_message is not None
    assert "refused at approval: over budget: together-prod: projected" in record.result_message
    assert stack.together.calls("update") == []


async def test_a_price_table_raised_before_a_scheduled_send_refuses_it_then(
    make_stack: StackFactory,
) -> None:
    policy = approvals_policy(half_spent_budget())
    stack = await make_stack(
        policy_yaml=policy, extra_settings={"gpuops_schedule_tick_seconds": 0.05}
    )
    opened = await request(stack, DAVE, f"update {TOGETHER} {CLUSTER} num_gpus=24 in=1m")
    await click(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, RequestState.APPROVED)
    await reload(stack, dearer(policy))
    stack.runtime.workflow.clock = lambda: datetime.now(UTC) + timedelta(seconds=61)
    record = await wait_state(stack.runtime.store, opened.id, RequestState.FAILED)
    assert record.result_message is not None
    assert "not sent: over budget: together-prod: projected" in record.result_message
    assert stack.together.calls("update") == []


async def team_gpus(stack: LocalStack) -> int:
    scope = team_scope(stack.runtime.policy, "research")
    return (await stack.runtime.ops.access.spend.standing(scope, datetime.now(UTC))).gpus


async def test_a_team_quota_counts_the_gpus_of_both_providers(make_stack: StackFactory) -> None:
    teams = "  research:\n    projects: [together-prod, e2e-delhi]\n    quota: {max_gpus: 100000}\n"
    stack = await make_stack(policy_yaml=spend_policy(teams=teams))
    now_gpus = await team_gpus(stack)
    assert now_gpus > 80  # Together's 80 and E2E's
    path = stack.runtime.settings.gpuops_policy
    path.write_text(path.read_text().replace("max_gpus: 100000", f"max_gpus: {now_gpus + 4}"))
    assert await stack.runtime.reload_policy() == "reloaded"
    text = await answer_to(stack, DAVE, f"update {TOGETHER} {CLUSTER} num_gpus=24")
    assert f"{now_gpus + 8} GPUs is over team research's quota of {now_gpus + 4} GPUs" in text
    text = await answer_to(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=1")
    assert f"over team research's quota of {now_gpus + 4} GPUs" in text, text
    assert stack.together.calls("update") == [] and stack.e2e.calls("action", "PUT") == []
    text = await answer_to(stack, DAVE, f"update {TOGETHER} {CLUSTER} num_gpus=8")
    assert "waiting for approval" in text and "quota" not in text, text  # fewer GPUs


def polls() -> float:
    labels = {"provider": "together", "outcome": "ok"}
    return REGISTRY.get_sample_value("gpuops_watch_polls_total", labels) or 0.0


def warnings_in(stack: LocalStack) -> list[str]:
    return [
        readable_text(m)
        for m in stack.slack.messages.get(NOTIFY, [])
        if "Budget warning" in readable_text(m)
    ]


async def test_each_warn_at_reached_is_announced_once_across_polls_and_a_restart(
    make_stack: StackFactory,
) -> None:
    budget = half_spent_budget().replace("warn_at: [40]", "warn_at: [40, 49, 99]")
    stack = await watched_stack(make_stack, policy_yaml=spend_policy(budget))
    await stack.slack.wait_for(lambda: len(warnings_in(stack)) >= 2)
    polled = polls()
    await until(lambda: polls() >= polled + 4)
    await stack.restart_bot()
    polled = polls()
    await until(lambda: polls() >= polled + 4)
    said = warnings_in(stack)
    assert len(said) == 2, said
    assert any("40% of together-prod's budget" in t for t in said), said
    assert any("49% of together-prod's budget" in t for t in said), said
    assert "projected month-end $" in said[0] and "h left" in said[0], said
    events = await stack.runtime.store.list_audit(limit=200)
    assert sorted(e.outcome or "" for e in events if e.event == "budget_warning") == ["40", "49"]
