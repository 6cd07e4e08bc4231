"""One fleet snapshot per project (bot.core.fleet), over real HTTP: ``/gpu list`` pages and
Home are served from it without a provider call of their own, the watcher's poll refreshes
it (a cluster the simulator gained shows up), an answer from an older snapshot says its
age, one older than the interval is never shown (the reader fetches), and the watcher lists
remediations of at most ``LISTINGS_PER_POLL`` clusters per poll, covering all in turns."""

from __future__ import annotations

import copy
from collections.abc import Callable

from bot.core.fleet import FleetSnapshots
from bot.core.watch.remediations import LISTINGS_PER_POLL
from bot.local.demo.stack import WATCHED_DEMO_POLICY, LocalStack
from bot.providers.http import RetryMode
from bot.providers.together.client import LARGE_LIST_BYTES, LIST
from bot.providers.together.models import ClusterList
from tests.conftest import StackFactory
from tests.support.slack_support import whisper

DAVE = "U04DAVE"
PROJECT = "together-prod"


def _add(stack: LocalStack, cluster_id: str, name: str) -> None:
    clone = copy.deepcopy(stack.together.clusters["tc-h100-reserved"])
    clone.update(cluster_id=cluster_id, cluster_name=name)
    stack.together.clusters[cluster_id] = clone


def _manual_clock(fleet: FleetSnapshots) -> Callable[[float], None]:
    """The snapshots' clock, moved by the test: returns ``advance(seconds)``."""
    now = [1000.0]
    fleet.clock = lambda: now[0]

    def advance(seconds: float) -> None:
        now[0] += seconds

    return advance


def _lists(stack: LocalStack) -> int:
    return len(stack.together.calls(route="list"))


async def test_list_and_home_share_the_snapshot_and_say_its_age(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    fleet = stack.runtime.ops.access.fleet
    advance = _manual_clock(fleet)
    first = await whisper(stack, DAVE, "C0INCIDENT", f"list {PROJECT}")
    assert "as of" not in first.text  # fetched just now: live
    fetched = _lists(stack)
    _add(stack, "tc-new-one", "brand <new> & shiny")
    advance(10)
    again = await whisper(stack, DAVE, "C0INCIDENT", f"list {PROJECT}")
    assert _lists(stack) == fetched  # from the snapshot: no provider call
    assert "tc-new-one" not in again.text
    assert "as of 10 s ago" in again.text
    published = len(stack.slack.calls_to("views.publish"))
    await stack.sender.app_home_opened(DAVE)
    await stack.slack.wait_for(
        lambda: len(stack.slack.calls_to("views.publish")) > published or None
    )
    assert _lists(stack) == fetched  # Home too
    home = str(stack.slack.homes[DAVE].as_slack())
    assert "as of 10 s ago" in home


async def test_a_snapshot_older_than_the_interval_is_fetched_again(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    fleet = stack.runtime.ops.access.fleet
    advance = _manual_clock(fleet)
    await whisper(stack, DAVE, "C0INCIDENT", f"list {PROJECT}")
    fetched = _lists(stack)
    _add(stack, "tc-new-two", "newer")
    advance(fleet.max_age(PROJECT))
    listed = await whisper(stack, DAVE, "C0INCIDENT", f"list {PROJECT}")
    assert _lists(stack) == fetched + 1
    assert "tc-new-two" in listed.text
    assert "as of" not in listed.text


async def test_the_watchers_poll_refreshes_the_snapshot(make_stack: StackFactory) -> None:
    stack = await make_stack(policy_yaml=WATCHED_DEMO_POLICY)
    runtime = stack.runtime
    await runtime.watcher.finish_polls(30.0)  # the background watcher polls no more
    fleet = runtime.ops.access.fleet
    assert runtime.watcher.fleet is fleet  # one snapshot, shared
    assert fleet.max_age(PROJECT) == runtime.watcher.projects[-1].every_seconds
    advance = _manual_clock(fleet)
    await whisper(stack, DAVE, "C0INCIDENT", f"list {PROJECT}")
    _add(stack, "tc-polled", "seen by the poll")
    advance(5)
    watched = next(p for p in runtime.watcher.projects if p.name == PROJECT)
    await runtime.watcher.poll_once(watched)
    fetched = _lists(stack)
    listed = await whisper(stack, DAVE, "C0INCIDENT", f"list {PROJECT}")
    assert "tc-polled" in listed.text
    assert _lists(stack) == fetched  # the poll's snapshot, no fetch of the list's own


async def test_a_change_sent_forgets_the_projects_snapshot(make_stack: StackFactory) -> None:
    stack = await make_stack()
    fleet = stack.runtime.ops.access.fleet
    await whisper(stack, DAVE, "C0INCIDENT", f"list {PROJECT}")
    assert PROJECT in fleet._views
    answer = await stack.sender.command(
        DAVE, "C0INCIDENT", f'update {PROJECT} tc-h200-ondemand num_gpus=16 reason="more"'
    )
    assert answer.status == 200
    await stack.slack.wait_for(lambda: len(stack.together.calls(method="PUT")) == 1 or None)
    await stack.runtime.workflow.drain()
    await stack.slack.wait_for(lambda: PROJECT not in fleet._views or None)


async def test_the_watcher_lists_remediations_of_a_bounded_share_per_poll(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(policy_yaml=WATCHED_DEMO_POLICY)
    for n in range(2 * LISTINGS_PER_POLL + 50):
        _add(stack, f"tc-many-{n:04d}", f"many-{n:04d}")
    runtime = stack.runtime
    await runtime.watcher.finish_polls(30.0)  # the background watcher polls no more
    watched = next(p for p in runtime.watcher.projects if p.name == PROJECT)
    total = sum(1 for c in stack.together.clusters.values() if c["project_id"] == "proj-123")
    listed: set[str] = set()
    for _ in range(3):
        before = len(stack.together.calls(route="remediations"))
        await runtime.watcher.poll_once(watched)
        calls = stack.together.calls(route="remediations")[before:]
        assert len(calls) <= LISTINGS_PER_POLL
        listed |= {call.path.split("/")[4] for call in calls}
    assert len(listed) == total  # every cluster in three polls


async def test_a_long_cluster_list_is_validated_in_turns_to_the_same_clusters(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    for n in range(300):  # about 1.6 MB with their nodes
        _add(stack, f"tc-long-{n:04d}", f"long-{n:04d}")
    client = stack.runtime.registry(PROJECT).client  # type: ignore[attr-defined]
    params = {"projectId": client.project_id}
    response = await client._reply("GET", "compute/clusters", LIST, RetryMode.READ, params=params)
    assert len(response.content) > LARGE_LIST_BYTES
    at_once = client._parsed(response, ClusterList, LIST, RetryMode.READ).clusters
    assert await client.list_clusters() == at_once
    assert len(at_once) == sum(
        1 for c in stack.together.clusters.values() if c["project_id"] == "proj-123"
    )
