"""The Home tab's data over the local stack (requests opened with signed slash commands,
E2E and Together simulators over HTTP), on SQLite and PostgreSQL, rendered and validated."""

from __future__ import annotations

import json
from typing import Any

import yaml
from slack_sdk.models.views import View

from bot.core.authorizer import Authorizer
from bot.core.home import STORE_UNAVAILABLE, HomeBuilder, HomeData, HomeLimits
from bot.core.policy import PolicyHolder
from bot.core.store import RequestState, Store
from bot.local.demo.stack import DEMO_POLICY, LocalStack
from bot.local.simulators.base import Fault, FaultKind
from bot.slack.home import home_view
from tests.support.catalog import policy_model
from tests.support.workflow_kit import deny, request, wait_state

BOB, CAROL, DAVE, ERIN, MALLORY = "U02BOB", "U03CAROL", "U04DAVE", "U05ERIN", "U06MALLORY"


def builder(
    stack: LocalStack, authorizer: Authorizer | None = None, limits: HomeLimits | None = None
) -> HomeBuilder:
    access = stack.runtime.ops.access
    return HomeBuilder(
        authorizer or access.authorizer, stack.runtime.store, access.adapter_for, limits
    )


def rendered(home: HomeData) -> str:
    view = home_view(home)
    View(**view).validate_json()
    return json.dumps(view, ensure_ascii=False)


async def test_approver_sees_pending_requests_with_their_price_lines(stack: LocalStack) -> None:
    hourly = await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=2")
    committed = await request(stack, DAVE, "action e2e-delhi 106 scale_cluster additional_nodes=1")
    no_plan = await request(stack, DAVE, "action e2e-delhi 104 scale_cluster additional_nodes=3")

    home = await builder(stack).build(BOB)
    prices = {r.id: r.price_line for r in home.approvals}
    assert set(prices) == {hourly.id, committed.id, no_plan.id}
    assert home.approvals_total == 3
    assert prices[hourly.id] == ("≈ +₹3,990.40/h: 2 more nodes at ₹1,995.20/h each, hourly plan")
    committed_line = prices[committed.id]
    assert committed_line is not None and "committed plan (30 days)" in committed_line
    assert prices[no_plan.id] is None
    assert [p.name for p in home.projects] == ["e2e-delhi", "together-prod"]
    assert all(p.error is None and p.clusters for p in home.projects)
    text = rendered(home)
    assert f'"value": "{hourly.id}"' in text and "approve_request" in text
    assert '"value": "e2e-delhi:101"' in text
    # an approver through a user group sees the same
    assert {r.id for r in (await builder(stack).build(CAROL)).approvals} == set(prices)


async def test_requester_sees_own_open_requests_not_as_approvals(stack: LocalStack) -> None:
    opened = await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=2")
    home = await builder(stack).build(DAVE)
    assert home.approvals == [] and home.approvals_total == 0
    assert [r.id for r in home.open_requests] == [opened.id]
    assert home.open_total == 1
    assert home.open_requests[0].price_line is not None
    assert '"cancel_request"' in rendered(home)


async def test_no_grant_no_project_names_and_viewer_gets_no_approvals(stack: LocalStack) -> None:
    await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=2")
    nobody = await builder(stack).build(MALLORY)
    assert (nobody.projects, nobody.approvals, nobody.open_requests) == ([], [], [])
    text = rendered(nobody)
    assert "e2e-delhi" not in text and "together-prod" not in text

    # Erin's viewer grant holds only in #incident: Home has no channel, so it shows nothing.
    viewer = await builder(stack).build(ERIN)
    assert (viewer.approvals, viewer.projects) == ([], [])
    assert "e2e-delhi" not in rendered(viewer)


async def test_approver_grant_that_does_not_hold_in_the_request_channel_lists_nothing(
    stack: LocalStack,
) -> None:
    await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=2")
    loaded = yaml.safe_load(DEMO_POLICY)
    for grant in loaded["grants"]:
        if grant.get("users") == [BOB]:
            grant["channels"] = ["C0RANDOM"]
    scoped = Authorizer(
        PolicyHolder(policy_model().model_validate(loaded)),
        stack.runtime.ops.access.authorizer.groups,
    )
    home = await builder(stack, scoped).build(BOB)
    assert home.approvals == [] and home.approvals_total == 0
    assert home.projects == []  # a grant scoped to channels shows no clusters on Home


async def test_finished_requests_are_recent_results_and_lists_are_cut_with_counts(
    stack: LocalStack,
) -> None:
    opened = [
        await request(
            stack, DAVE, f"action e2e-delhi {cluster_id} scale_cluster additional_nodes=1"
        )
        for cluster_id in ("101", "103", "105", "104")
    ]
    await deny(stack, opened[3], BOB)
    await wait_state(stack.runtime.store, opened[3].id, RequestState.DENIED)
    limits = HomeLimits(approvals=2, open_requests=1, clusters_per_project=2)
    home = await builder(stack, limits=limits).build(BOB)
    assert (len(home.approvals), home.approvals_total) == (2, 3)
    e2e = next(p for p in home.projects if p.name == "e2e-delhi")
    assert len(e2e.clusters) == 2 and e2e.total_clusters > 2
    text = rendered(home)
    assert "1 more not shown here" in text and "`/gpu list e2e-delhi`" in text

    dave = await builder(stack, limits=limits).build(DAVE)
    assert (len(dave.open_requests), dave.open_total) == (1, 3)
    assert [(r.id, r.state, r.decided_by) for r in dave.recent] == [(opened[3].id, "denied", BOB)]
    assert dave.recent_total == 1 and dave.recent[0].price_line is None
    assert "denied" in rendered(dave)


async def test_a_provider_that_fails_is_said_on_its_project_and_the_rest_still_shows(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    stack.together.faults.add(
        Fault(route="list", kind=FaultKind.SERVER_ERROR, status=503, times=-1)
    )
    home = await builder(stack).build(BOB)
    together = next(p for p in home.projects if p.name == "together-prod")
    e2e = next(p for p in home.projects if p.name == "e2e-delhi")
    assert together.error is not None and together.clusters == []
    assert e2e.error is None and e2e.clusters
    text = rendered(home)
    assert ":x:" in text and "e2e-delhi:101" in text
    assert stack.options.together_key not in text


async def test_a_slow_provider_does_not_hold_up_the_tab(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    # A bound Together's answer meets even on a busy machine; E2E's never arrives in time.
    stack.e2e.faults.add(Fault(route="list", kind=FaultKind.LATENCY, seconds=60.0, times=-1))
    limits = HomeLimits(list_seconds=5.0)
    home = await builder(stack, limits=limits).build(BOB)
    e2e = next(p for p in home.projects if p.name == "e2e-delhi")
    assert e2e.error == "its clusters did not arrive within 5 s"
    assert next(p for p in home.projects if p.name == "together-prod").clusters


class UnreachableStore(Store):
    """The stack's store as seen while its database cannot be reached."""

    def _begin(self) -> Any:
        raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5432)")


async def test_a_failing_store_still_shows_the_clusters_and_says_so(
    sqlite_stack: LocalStack,
) -> None:
    access = sqlite_stack.runtime.ops.access
    store = sqlite_stack.runtime.store
    unreachable = UnreachableStore(store.engine, database=store.database)
    home = await HomeBuilder(access.authorizer, unreachable, access.adapter_for).build(BOB)
    assert home.requests_error == STORE_UNAVAILABLE
    assert [p.name for p in home.projects] == ["e2e-delhi", "together-prod"]
    shown = rendered(home)
    assert "The state store is unavailable" in shown and "e2e-delhi:101" in shown
    assert "approve_request" not in shown
