"""The database fault matrix, end to end over real HTTP: PostgreSQL behind the fault proxy
(bot.local.faults.proxy) stopped (connections refused and reset) or hanging at each step of
the change path, with two replicas on one database where it matters (and three for the
executor's loss mid-send, issue #34).

Each cell asserts the end state, what the person was told, how many provider calls were
made, and that no two changes ran on one cluster at once. Leases, store timeouts and retry
waits are short (settings), so the whole matrix takes well under a minute on a quiet machine.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from bot.core.answers import STORE_UNAVAILABLE_TEXT, Notice
from bot.core.ask.change import ChangeAsk
from bot.core.requests.schedule import Schedule
from bot.core.requests.workflow import ChangeWorkflow
from bot.core.store import RequestState, Started, Store
from bot.local.demo.stack import DEMO_POLICY, BotReplica, LocalStack
from bot.local.faults.proxy import FaultProxy
from bot.local.simulators.base import Fault, FaultKind
from bot.local.slack.sender import SlackSender
from tests.conftest import PG_URL_TEMPLATE, StackFactory, create_pg_database, drop_pg_database
from tests.support.reliability import FAST_RETRY_SETTINGS
from tests.support.slack_support import blocks_json, opened_modal, roots
from tests.support.watch_kit import decisions_sent, pending_remediation, press, watched_stack
from tests.support.workflow_kit import (
    BOB,
    CAROL,
    CHANNEL,
    DAVE,
    Opened,
    buttons,
    click,
    next_ephemeral,
    open_direct,
    poll_until,
    readable_text,
    thread_texts,
    wait_reply,
    wait_state,
)

pytestmark = pytest.mark.postgres

S = RequestState
LEASE = 1.0  # execution lease (its heartbeat renews every third of it)
# The transaction bound of a replica behind the proxy from the start of a fault until it
# heals (OutageProxy). Before and after, its bound is the healthy one like every replica's.
STORE_TIMEOUT = 0.5
HEALTHY_STORE_TIMEOUT = 5.0  # a busy machine must not fail a healthy transaction
DB_SETTINGS: dict[str, Any] = {
    **FAST_RETRY_SETTINGS,
    "gpuops_exec_lease_seconds": LEASE,
    "gpuops_db_connect_timeout": HEALTHY_STORE_TIMEOUT,
    "gpuops_db_operation_timeout": HEALTHY_STORE_TIMEOUT,
}
TOGETHER = ("together-prod", "tc-h100-reserved")  # scaling it down needs approval
E2E_CLUSTERS = ("101", "103", "104", "105", "106")
ANSWER_WITHIN = 5.0  # a person hears back this soon even with the store hanging
SLOW_UPDATE = 4.0  # case 1: Together takes this long to answer the retried update


@pytest.fixture
async def database() -> AsyncIterator[str]:
    name = await create_pg_database()
    yield name
    await drop_pg_database(name)


class OutageProxy(FaultProxy):
    """The fault proxy, tightening the transaction bound of the stores behind it for as long
    as a fault lasts: a person hears back within STORE_TIMEOUT of the store going silent.
    A bound that short from the start would fail healthy transactions through the proxy
    on a busy machine, before any fault (a start that took longer was refused, and the
    test's change never sent)."""

    def __init__(self, target_port: int) -> None:
        super().__init__(target_port=target_port)
        self.stores: list[Store] = []

    def _bound(self, seconds: float) -> None:
        for store in self.stores:
            store._operation_timeout = seconds  # a test's knob on the store, not its API

    async def outage(self) -> None:
        self._bound(STORE_TIMEOUT)
        await super().outage()

    def hang(self) -> None:
        self._bound(STORE_TIMEOUT)
        super().hang()

    def heal(self) -> None:
        super().heal()
        self._bound(HEALTHY_STORE_TIMEOUT)


FaultStep = Callable[[OutageProxy], Awaitable[None]]


async def stopped(proxy: OutageProxy) -> None:
    """A database that went away: new connections refused, open ones reset."""
    await proxy.outage()


async def hanging(proxy: OutageProxy) -> None:
    """A database that accepts connections and never answers."""
    proxy.hang()


FAULTS: dict[str, FaultStep] = {"stopped": stopped, "hanging": hanging}


@pytest.fixture
async def proxy() -> AsyncIterator[OutageProxy]:
    fault_proxy = OutageProxy(target_port=5432)
    await fault_proxy.start()
    yield fault_proxy
    await fault_proxy.close()


async def start_proxied(stack: LocalStack, proxy: OutageProxy, database: str) -> BotReplica:
    """Replica "proxied" on ``database`` through ``proxy``, which bounds its store."""
    replica = await stack.start_replica(
        "proxied", start_background=False, database_url=_url(database, proxy.port)
    )
    proxy.stores.append(replica.runtime.store)
    return replica


def _url(database: str, port: int = 5432) -> str:
    return PG_URL_TEMPLATE.format(name=database).replace(":5432/", f":{port}/")


@pytest.fixture
async def stack(make_stack: StackFactory, database: str) -> LocalStack:
    """Replica "direct" on a healthy connection; the tests add replicas through the proxy."""
    return await make_stack(
        database_url=_url(database),
        instance_id="direct",
        transition_seconds=0,
        total_timeout=5.0,  # room for case 1's slow update
        # Recovery runs when a test calls it (recover_interrupted): a background round
        # 30 s in, on a busy machine, would interrupt the changes a test holds in an outage.
        sweep_seconds=3600,
        extra_settings=DB_SETTINGS,
    )


@pytest.fixture
async def proxied(
    stack: LocalStack, proxy: OutageProxy, database: str
) -> AsyncIterator[BotReplica]:
    """Replica "proxied" on the same database, through the fault proxy (healed at the end)."""
    replica = await start_proxied(stack, proxy, database)
    yield replica
    await proxy.heal_async()


def provider_writes(stack: LocalStack) -> int:
    return len(stack.e2e.calls("action", "PUT")) + len(stack.together.calls("update", "PUT"))


async def answer_to(stack: LocalStack, sender: SlackSender, text: str) -> str:
    """DAVE types ``/gpu text`` through ``sender``; the ephemeral answer's text (timed)."""
    seen = len(stack.slack.ephemerals_for(DAVE))
    started = time.monotonic()
    result = await sender.command(DAVE, CHANNEL, text)
    assert result.status == 200 and result.acked_in_time, result
    answer = await next_ephemeral(stack, DAVE, seen, within=ANSWER_WITHIN)
    assert time.monotonic() - started < ANSWER_WITHIN
    return answer.text


# ---- people first: commands, clicks and health while the store is down ------------------


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_change_command_while_the_store_is_down_is_refused_clearly(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy, fault: str
) -> None:
    await FAULTS[fault](proxy)
    text = await answer_to(
        stack, proxied.sender, "action e2e-delhi 101 scale_cluster additional_nodes=1"
    )
    assert STORE_UNAVAILABLE_TEXT in text
    await proxy.heal_async()
    assert await stack.runtime.store.list_requests() == []  # nothing was created
    assert provider_writes(stack) == 0


@pytest.mark.parametrize("fault", ["stopped"])
async def test_a_form_command_while_the_store_is_down_is_refused_before_its_form_opens(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy, fault: str
) -> None:
    """A change that opens a form (forms first: before the pacer) is refused like any
    change when its de-dup write finds the store down: told, no form opened, nothing made."""
    await FAULTS[fault](proxy)
    project, cluster = TOGETHER
    text = await answer_to(stack, proxied.sender, f"update {project} {cluster}")
    assert STORE_UNAVAILABLE_TEXT in text
    assert stack.slack.calls_to("views.open") == []
    await proxy.heal_async()
    assert await stack.runtime.store.list_requests() == []
    assert provider_writes(stack) == 0


@pytest.mark.parametrize("fault", FAULTS)
async def test_help_show_and_list_work_without_the_store(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy, fault: str
) -> None:
    await FAULTS[fault](proxy)
    assert "tc-h200-ondemand" in await answer_to(stack, proxied.sender, "list together-prod")
    assert "/gpu" in await answer_to(stack, proxied.sender, "help")
    seen = len(roots(stack, CHANNEL))
    result = await proxied.sender.command(DAVE, CHANNEL, "show e2e-delhi 101")
    assert result.status == 200 and result.acked_in_time
    await stack.slack.wait_for(
        lambda: next(iter(roots(stack, CHANNEL)[seen:]), None), within=ANSWER_WITHIN
    )


@pytest.mark.parametrize(
    ("decision", "fault"),
    [
        *(("approve_request", fault) for fault in FAULTS),
        ("deny_request", "hanging"),
        ("cancel_request", "stopped"),
    ],
)
async def test_a_click_while_the_store_is_down_changes_nothing(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy, fault: str, decision: str
) -> None:
    opened = await open_direct(
        stack, DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    clicker = DAVE if decision == "cancel_request" else BOB
    await FAULTS[fault](proxy)
    seen = len(stack.slack.ephemerals_for(clicker))
    started = time.monotonic()
    await click(stack, opened, clicker, decision, sender=proxied.sender)
    told = await next_ephemeral(stack, clicker, seen, within=ANSWER_WITHIN)
    assert STORE_UNAVAILABLE_TEXT in told.text
    assert time.monotonic() - started < ANSWER_WITHIN
    await proxy.heal_async()
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.PENDING
    assert provider_writes(stack) == 0


@pytest.mark.parametrize("in_flight", [False, True], ids=["down", "lost-after-de-dup"])
async def test_a_home_click_while_the_store_is_down_changes_nothing(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy, in_flight: bool
) -> None:
    """Approve on the App Home tab while the store hangs (from before the click, or from
    right after its de-dup write): the approver is told by DM that nothing was changed; the
    request stays pending."""
    opened = await open_direct(
        stack, DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    assert (await stack.sender.app_home_opened(BOB)).status == 200

    def approvable() -> bool | None:
        home = stack.slack.home_of(BOB)
        return (home is not None and opened.id in json.dumps(home.blocks)) or None

    await stack.slack.wait_for(approvable, within=ANSWER_WITHIN)
    proxied_store: Store = proxied.runtime.store
    real_remember = proxied_store.remember_delivery

    async def remember_then_lose_the_store(key: str) -> bool:
        first = await real_remember(key)
        await hanging(proxy)
        return first

    if in_flight:
        proxied_store.remember_delivery = remember_then_lose_the_store  # type: ignore[method-assign]
    else:
        await hanging(proxy)
    dm = stack.slack.dm_channel(BOB)
    seen = len(stack.slack.messages.get(dm, []))
    result = await proxied.sender.home_action(BOB, action_id="approve_request", value=opened.id)
    assert result.status == 200 and result.acked_in_time, result
    told = await stack.slack.wait_for(
        lambda: next(iter(stack.slack.messages.get(dm, [])[seen:]), None), within=ANSWER_WITHIN
    )
    assert STORE_UNAVAILABLE_TEXT in told.text
    await proxy.heal_async()
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.PENDING
    assert provider_writes(stack) == 0


@pytest.mark.parametrize("fault", FAULTS)
async def test_healthz_is_not_ok_while_the_store_is_unreachable(
    proxied: BotReplica, proxy: OutageProxy, fault: str
) -> None:
    async with httpx.AsyncClient(base_url=proxied.base_url, timeout=10) as client:
        assert (await client.get("/healthz")).status_code == 200
        await FAULTS[fault](proxy)
        assert (await client.get("/healthz")).status_code == 503
        await proxy.heal_async()
        await poll_until(lambda: _ok(client), within=5.0)


async def _ok(client: httpx.AsyncClient) -> bool:
    return (await client.get("/healthz")).status_code == 200


# ---- the executor: heartbeat, result recording, fencing ---------------------------------


async def _approve_on(stack: LocalStack, replica: BotReplica, opened: Opened) -> None:
    await click(stack, opened, BOB, sender=replica.sender)


async def healthy_replicas(stack: LocalStack, replicas: int) -> list[ChangeWorkflow]:
    """The workflows of the replicas on a healthy connection: "direct", and with 3 replicas
    (issue #34) a third one on the same database beside it."""
    workflows = [stack.runtime.workflow]
    for n in range(3, replicas + 1):
        replica = await stack.start_replica(f"direct-{n}", start_background=False)
        workflows.append(replica.runtime.workflow)
    return workflows


async def recover_on(workflows: list[ChangeWorkflow]) -> int:
    """Every healthy replica's recovery at the same moment: how many changes they ended."""
    return sum(await asyncio.gather(*(w.recover_interrupted() for w in workflows)))


@pytest.mark.parametrize("replicas", [2, 3])
async def test_case_1_a_second_change_waits_until_the_first_call_can_no_longer_arrive(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy, replicas: int
) -> None:
    """Issue #11 case 1: a long Together update, retried, while its replica loses the
    database; recovery elsewhere (on each other replica at once) ends it ``unknown`` once
    but keeps the cluster; a second change on the cluster does not run while the first call
    may still arrive; the first replica then records what really happened, as a correction."""
    healthy = await healthy_replicas(stack, replicas)
    project, cluster = TOGETHER
    stack.together.faults.add(Fault(route="update", kind=FaultKind.SERVER_ERROR, status=503))
    stack.together.faults.add(Fault(route="update", kind=FaultKind.LATENCY, seconds=SLOW_UPDATE))
    first = await open_direct(stack, DAVE, project, cluster, "update", {"num_gpus": "8"})
    await _approve_on(stack, proxied, first)
    await wait_state(stack.runtime.store, first.id, S.EXECUTING)
    await poll_until(lambda: len(stack.together.calls("update", "PUT")) >= 1)
    await stopped(proxy)  # the sending replica loses its database mid-call

    # its lease lapses; recovery on the healthy replica gives up on it (unknown) …
    await asyncio.sleep(LEASE * 1.5)
    assert await recover_on(healthy) == 1
    record = await wait_state(stack.runtime.store, first.id, S.UNKNOWN)
    assert record.result_message and "stopped answering" in record.result_message
    assert "gpuops restarted" not in record.result_message  # it does not know that
    # … but the cluster stays taken: the first call may still reach Together
    second = await open_direct(stack, DAVE, project, cluster, "update", {"num_gpus": "8"})
    await click(stack, second, BOB)
    refused_second = await wait_state(stack.runtime.store, second.id, S.FAILED)
    assert refused_second.result_message and first.id in refused_second.result_message
    await wait_reply(stack, second, f"another change ({first.id})")

    await proxy.heal_async()  # the first replica comes back with Together's answer
    corrected = await wait_state(stack.runtime.store, first.id, S.SUCCEEDED, within=10)
    assert corrected.result_message == "Together accepted the update"
    note = await wait_reply(stack, first, "Correction")
    assert "Together accepted the update" in note.text
    puts = stack.together.calls("update", "PUT")
    assert [p.body for p in puts] == [{"num_gpus": 8}, {"num_gpus": 8}]  # the 503, its retry
    assert stack.together.clusters[cluster]["num_gpus"] == 8


async def test_case_3_results_answered_during_an_outage_are_recorded_after_it(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy
) -> None:
    """Issue #11 case 3: five approved scale changes whose provider answers arrive while the
    store is down are recorded and reported once it is back — none ``unknown``."""
    store = stack.runtime.store
    for _ in E2E_CLUSTERS:
        stack.e2e.faults.add(Fault(route="action", kind=FaultKind.LATENCY, seconds=0.8))
    opened = [
        await open_direct(stack, DAVE, "e2e-delhi", c, "scale_cluster", {"additional_nodes": "1"})
        for c in E2E_CLUSTERS
    ]
    for each in opened:
        await _approve_on(stack, proxied, each)
    await poll_until(lambda: len(stack.e2e.calls("action", "PUT")) == len(E2E_CLUSTERS), within=30)
    await hanging(proxy)
    kept = proxied.runtime.workflow.execution.pending
    await poll_until(lambda: len(kept) == len(E2E_CLUSTERS), within=30)  # every answer is in
    await asyncio.sleep(LEASE * 2)  # and every lease lapses (at least this long)
    for each in opened:
        await wait_reply(stack, each, "it will record the result and confirm here")
    await proxy.heal_async()
    for each in opened:  # the replay waits up to its backoff's 5 s, then records each
        record = await wait_state(store, each.id, S.SUCCEEDED, S.UNKNOWN, within=30)
        assert record.state is S.SUCCEEDED, record.result_message
        await wait_reply(stack, each, "lost contact with its database while sending")
    assert len(stack.e2e.calls("action", "PUT")) == len(E2E_CLUSTERS)


@pytest.mark.parametrize("replicas", [2, 3])
async def test_a_heartbeat_blip_shorter_than_the_lease_changes_nothing(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy, replicas: int
) -> None:
    store = stack.runtime.store
    healthy = await healthy_replicas(stack, replicas)
    stack.e2e.faults.add(Fault(route="action", kind=FaultKind.LATENCY, seconds=1.5))
    opened = await open_direct(
        stack, DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    await _approve_on(stack, proxied, opened)
    await poll_until(lambda: len(stack.e2e.calls("action", "PUT")) == 1)
    await stopped(proxy)
    await asyncio.sleep(LEASE / 3)
    await proxy.heal_async()
    # the replica renewed in time: recovery elsewhere must leave it alone
    await asyncio.sleep(LEASE / 3)
    assert await recover_on(healthy) == 0
    record = await wait_state(store, opened.id, S.SUCCEEDED, within=10)
    assert record.result_message and "Correction" not in record.result_message
    assert len(stack.e2e.calls("action", "PUT")) == 1
    assert not any("database" in t for t in thread_texts(stack, opened))


async def test_an_outage_when_recording_the_start_sends_nothing(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy, database: str
) -> None:
    """The store goes away between the approval and the start of sending: the change is
    never sent, and once the store is back it ends ``failed`` saying nothing was sent."""
    opened = await open_direct(
        stack, DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    proxied_store: Store = proxied.runtime.store
    real_start = proxied_store.start_execution

    async def lose_the_store_then_start(*args: Any, **kwargs: Any) -> Started:
        await stopped(proxy)
        return await real_start(*args, **kwargs)

    proxied_store.start_execution = lose_the_store_then_start  # type: ignore[method-assign]
    await _approve_on(stack, proxied, opened)
    # the replica has met the outage and keeps "not sent" for when the store is back
    kept = proxied.runtime.workflow.execution.pending
    await poll_until(lambda: len(kept) == 1, within=30)
    await proxy.heal_async()
    record = await wait_state(stack.runtime.store, opened.id, S.FAILED, within=30)
    assert record.result_message and "nothing was sent" in record.result_message
    assert provider_writes(stack) == 0
    await wait_reply(stack, opened, "nothing was sent")


async def test_follow_up_goes_on_through_an_outage(
    make_stack: StackFactory, database: str, proxy: OutageProxy
) -> None:
    """The store goes away right after the result is recorded: the replica that sent the
    change still follows the cluster until it is steady and says so in the thread."""
    stack = await make_stack(  # the cluster provisions until the store is gone
        database_url=_url(database),
        poll_seconds=0.2,
        transition_seconds=600.0,
        extra_settings=DB_SETTINGS,
    )
    proxied = await start_proxied(stack, proxy, database)
    project, cluster = TOGETHER
    opened = await open_direct(stack, DAVE, project, cluster, "update", {"num_gpus": "8"})
    await _approve_on(stack, proxied, opened)
    await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    await stopped(proxy)
    stack.together.transition_seconds = 0.0  # Ready at the next look, during the outage
    await wait_reply(stack, opened, " is Ready.")
    await proxy.heal_async()
    assert len(stack.together.calls("update", "PUT")) == 1
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.SUCCEEDED


@pytest.mark.parametrize("fault", FAULTS)
async def test_the_store_lost_at_request_creation_opens_nothing(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy, fault: str
) -> None:
    """The command's de-dup write goes through, then the store goes away before the request
    is created: the person is told, nothing is created, nothing is sent."""
    proxied_store: Store = proxied.runtime.store
    real_remember = proxied_store.remember_delivery

    async def remember_then_lose_the_store(key: str) -> bool:
        first = await real_remember(key)
        await FAULTS[fault](proxy)
        return first

    proxied_store.remember_delivery = remember_then_lose_the_store  # type: ignore[method-assign]
    text = await answer_to(
        stack, proxied.sender, "action e2e-delhi 101 scale_cluster additional_nodes=1"
    )
    assert STORE_UNAVAILABLE_TEXT in text
    await proxy.heal_async()
    assert await stack.runtime.store.list_requests() == []
    assert provider_writes(stack) == 0
    assert roots(stack, CHANNEL) == []  # no request message was posted either


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_form_submitted_while_the_store_is_down_opens_nothing(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy, fault: str
) -> None:
    project, cluster = TOGETHER
    await proxied.sender.command(DAVE, CHANNEL, f"update {project} {cluster}")
    view = await opened_modal(stack, DAVE, "gpu_update")
    await FAULTS[fault](proxy)
    seen = len(stack.slack.ephemerals_for(DAVE))
    submitted = await proxied.sender.view_submission(DAVE, view.id, {"num_gpus": "8"})
    assert submitted.status == 200 and submitted.problems == ()
    told = await next_ephemeral(stack, DAVE, seen, within=ANSWER_WITHIN)
    assert STORE_UNAVAILABLE_TEXT in told.text
    await proxy.heal_async()
    assert await stack.runtime.store.list_requests() == []
    assert provider_writes(stack) == 0


@pytest.mark.parametrize("fault", ["hanging"])
async def test_a_form_on_its_checking_view_when_the_store_goes_says_so_and_opens_nothing(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy, fault: str
) -> None:
    """The submission's de-dup write goes through, its checks outlast Slack's deadline (a
    slow provider: the form shows "checking…"), then the store goes away before the view's
    own de-dup write: the view and an ephemeral say nothing was changed; nothing is created
    or sent."""
    project, cluster = TOGETHER
    await proxied.sender.command(DAVE, CHANNEL, f"update {project} {cluster}")
    view = await opened_modal(stack, DAVE, "gpu_update")
    proxied_store: Store = proxied.runtime.store
    real_remember = proxied_store.remember_delivery

    async def remember_then_lose_the_store(key: str) -> bool:
        first = await real_remember(key)
        await FAULTS[fault](proxy)
        return first

    proxied_store.remember_delivery = remember_then_lose_the_store  # type: ignore[method-assign]
    stack.together.faults.add(Fault(kind=FaultKind.LATENCY, seconds=1.8, times=-1))
    seen = len(stack.slack.ephemerals_for(DAVE))
    submitted = await proxied.sender.view_submission(DAVE, view.id, {"num_gpus": "8"})
    assert submitted.status == 200 and not submitted.late and submitted.problems == ()
    assert submitted.json["response_action"] == "update"  # the "checking…" view
    told = await next_ephemeral(stack, DAVE, seen, within=ANSWER_WITHIN)
    assert STORE_UNAVAILABLE_TEXT in told.text
    await stack.slack.wait_for(
        lambda: STORE_UNAVAILABLE_TEXT in blocks_json(stack.slack.views[view.id].blocks) or None,
        within=ANSWER_WITHIN,
    )
    await proxy.heal_async()
    assert await stack.runtime.store.list_requests() == []
    assert provider_writes(stack) == 0


@pytest.mark.parametrize("fault", FAULTS)
async def test_an_approval_in_flight_when_the_store_goes_is_answered_and_left_pending(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy, fault: str
) -> None:
    """The click's de-dup write goes through, then the store goes away: the approver is
    told, the request stays pending (approvable later), nothing is sent."""
    opened = await open_direct(
        stack, DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    proxied_store: Store = proxied.runtime.store
    real_remember = proxied_store.remember_delivery

    async def remember_then_lose_the_store(key: str) -> bool:
        first = await real_remember(key)
        await FAULTS[fault](proxy)
        return first

    proxied_store.remember_delivery = remember_then_lose_the_store  # type: ignore[method-assign]
    seen = len(stack.slack.ephemerals_for(BOB))
    await click(stack, opened, BOB, sender=proxied.sender)
    told = await next_ephemeral(stack, BOB, seen, within=ANSWER_WITHIN)
    assert STORE_UNAVAILABLE_TEXT in told.text
    await proxy.heal_async()
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.PENDING
    assert provider_writes(stack) == 0
    await click(stack, opened, BOB)  # still approvable once the store is back
    await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert provider_writes(stack) == 1


async def test_the_sweeper_rides_out_an_outage_with_one_line_a_round(
    stack: LocalStack,
    proxied: BotReplica,
    proxy: OutageProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    opened = await open_direct(
        stack, DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    await stopped(proxy)
    sweeping = asyncio.create_task(proxied.runtime.workflow.sweep_forever(0.05))
    await poll_until(lambda: caplog.text.count("sweeper round skipped") >= 2)
    await proxy.heal_async()
    sweeping.cancel()
    await asyncio.gather(sweeping, return_exceptions=True)
    assert "Traceback" not in caplog.text and "sweeper round failed" not in caplog.text
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.PENDING


async def test_a_click_is_answered_before_the_deadline_under_the_default_store_bounds(
    make_stack: StackFactory, database: str, proxy: OutageProxy
) -> None:
    """With the production bounds (a 10 s transaction), a hanging store still cannot hold a
    click's answer past Slack's deadline: the de-dup write gives up before it, and the
    approver is told at once that nothing was changed."""
    stack = await make_stack(
        database_url=_url(database, proxy.port),
        extra_settings={"gpuops_db_operation_timeout": 10.0},
    )
    opened = await open_direct(
        stack, DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    await hanging(proxy)
    seen = len(stack.slack.ephemerals_for(BOB))
    started = time.monotonic()
    result = await click(stack, opened, BOB)
    assert result.elapsed < 3.0
    told = await next_ephemeral(stack, BOB, seen, within=ANSWER_WITHIN)
    assert STORE_UNAVAILABLE_TEXT in told.text
    assert time.monotonic() - started < 3.0  # told within Slack's 3 s, not after 10 s
    await proxy.heal_async()
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.PENDING
    assert provider_writes(stack) == 0


async def test_commands_are_answered_in_time_under_the_default_store_bounds(
    make_stack: StackFactory, database: str, proxy: OutageProxy
) -> None:
    """With the production bounds, a hanging store delays no command past a few seconds:
    the de-dup write is given up after 2 s; help and list answer, a change is refused."""
    stack = await make_stack(
        database_url=_url(database, proxy.port),
        extra_settings={"gpuops_db_operation_timeout": 10.0},
    )
    await hanging(proxy)
    assert "/gpu" in await answer_to(stack, stack.sender, "help")
    assert "tc-h200-ondemand" in await answer_to(stack, stack.sender, "list together-prod")
    text = await answer_to(
        stack, stack.sender, "action e2e-delhi 101 scale_cluster additional_nodes=1"
    )
    assert STORE_UNAVAILABLE_TEXT in text
    await proxy.heal_async()
    assert await stack.runtime.store.list_requests() == []
    assert provider_writes(stack) == 0


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_mention_show_is_answered_in_its_thread_without_the_store(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy, fault: str
) -> None:
    root = await stack.slack.post_user_message(CHANNEL, DAVE, "GPUs look stuck?")
    await FAULTS[fault](proxy)
    started = time.monotonic()
    result = await proxied.sender.mention(DAVE, CHANNEL, "show e2e-delhi 101", thread_ts=root.ts)
    assert result.status == 200 and result.acked_in_time
    answer = await stack.slack.wait_for(
        lambda: next((m for m in stack.slack.replies(CHANNEL, root.ts) if m.bot_id), None),
        within=ANSWER_WITHIN,
    )
    assert "(101)" in answer.text and time.monotonic() - started < ANSWER_WITHIN
    assert provider_writes(stack) == 0


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_remediation_click_while_the_store_is_down_is_answered_in_time(
    make_stack: StackFactory, database: str, proxy: OutageProxy, fault: str
) -> None:
    """Issue #16 point 4: approve on a remediation through the replica whose database is
    stopped or hanging: told at once that nothing was changed (was: no answer, "unhandled
    error in a handler: StoreUnavailable"); nothing sent."""
    stack = await watched_stack(make_stack, database_url=_url(database), extra_settings=DB_SETTINGS)
    proxied = await start_proxied(stack, proxy, database)
    remediation_id, message = await pending_remediation(stack)
    await FAULTS[fault](proxy)
    seen = len(stack.slack.ephemerals_for(BOB))
    started = time.monotonic()
    await press(stack, message, BOB, "approve_remediation", sender=proxied.sender)
    told = await next_ephemeral(stack, BOB, seen, within=ANSWER_WITHIN)
    assert STORE_UNAVAILABLE_TEXT in told.text
    assert time.monotonic() - started < ANSWER_WITHIN
    await proxy.heal_async()
    assert decisions_sent(stack, remediation_id) == []


# ---- scheduled changes (SPEC §9) ---------------------------------------------------------


async def scheduled_direct(stack: LocalStack) -> Opened:
    """DAVE schedules a scale of 101 a minute ahead (through the workflow); its prompt."""
    reply = await stack.runtime.workflow.request_change(
        ChangeAsk(
            user=DAVE,
            channel=CHANNEL,
            project="e2e-delhi",
            cluster_id="101",
            action="scale_cluster",
            inputs={"additional_nodes": "1"},
            reason=None,
            schedule=Schedule(after=timedelta(minutes=1)),
        )
    )
    assert isinstance(reply.content, Notice) and "scheduled for" in reply.content.text, reply
    [record] = await stack.runtime.store.list_requests()
    assert record.root_ts is not None and record.prompt_ts is not None
    return Opened(record.id, CHANNEL, record.root_ts, record.prompt_ts)


def ahead(replica: BotReplica | LocalStack, seconds: float) -> None:
    replica.runtime.workflow.clock = lambda: datetime.now(UTC) + timedelta(seconds=seconds)


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_scheduled_change_due_in_a_store_outage_is_sent_once_after_it(
    stack: LocalStack,
    proxied: BotReplica,
    proxy: OutageProxy,
    fault: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its time comes while the replica that would send it cannot reach the store: every
    tick is skipped with one line, nothing is lost or sent; once the store is back it is
    sent, once, though the other replica's scheduler looks too."""
    opened = await scheduled_direct(stack)
    await click(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, S.APPROVED)
    await FAULTS[fault](proxy)
    ahead(proxied, 61)
    ticking = asyncio.create_task(proxied.runtime.workflow.scheduler.run_forever(0.05))
    try:
        await poll_until(lambda: caplog.text.count("scheduler tick skipped") >= 2, within=10)
        assert provider_writes(stack) == 0
        await proxy.heal_async()
        await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED, within=10)
    finally:
        ticking.cancel()
        await asyncio.gather(ticking, return_exceptions=True)
    ahead(stack, 61)
    assert await stack.runtime.workflow.scheduler.run_due() == 0
    await proxied.runtime.workflow.drain()
    assert provider_writes(stack) == 1
    assert "Traceback" not in caplog.text and "scheduler tick failed" not in caplog.text


# ---- a decision whose COMMIT reached the server and whose answer was lost (issue #32.1) -

SCALE_NEEDS_TWO = DEMO_POLICY.replace(
    "  break_glass: true\n",
    "  break_glass: true\n  rules:\n"
    "    - projects: [e2e-delhi]\n      kinds: [scale_cluster]\n      approvers: 2\n",
)
assert SCALE_NEEDS_TWO != DEMO_POLICY


def lose_the_commit_answer_of(
    store: Store, method: str, proxy: OutageProxy
) -> Callable[[], Awaitable[None]]:
    """Arm ``proxy`` as ``store.method`` (the decision's one transaction) starts: its COMMIT
    reaches the server and the answer is dropped, the link reset. Returns a wait for it."""
    real = getattr(store, method)

    async def armed(*args: Any, **kwargs: Any) -> Any:
        setattr(store, method, real)  # once
        proxy.lose_commit_answer()
        return await real(*args, **kwargs)

    setattr(store, method, armed)

    async def lost() -> None:
        await asyncio.wait_for(proxy.commit_answer_lost.wait(), timeout=20)

    return lost


async def _two_approvers(stack: LocalStack, *replicas: BotReplica) -> None:
    stack.runtime.settings.gpuops_policy.write_text(SCALE_NEEDS_TWO)
    for runtime in (stack.runtime, *(r.runtime for r in replicas)):
        assert await runtime.reload_policy() == "reloaded"


async def test_an_approval_whose_commit_answer_is_lost_at_the_wire_is_told_recorded(
    stack: LocalStack, proxied: BotReplica, proxy: OutageProxy
) -> None:
    """2 approvers needed; bob's approval (through the proxy) commits at the server, the
    answer never comes back: bob is told "recorded: 1 of 2" (read back), the approval is
    audited, the prompt redrawn, and it is sent only once carol approves too: 1 PUT."""
    await _two_approvers(stack, proxied)
    opened = await open_direct(
        stack, DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    lost = lose_the_commit_answer_of(proxied.runtime.store, "decide_approval", proxy)
    seen = len(stack.slack.ephemerals_for(BOB))
    await click(stack, opened, BOB, sender=proxied.sender)
    await lost()
    told = await next_ephemeral(stack, BOB, seen, within=ANSWER_WITHIN * 4)
    assert told.text == f"Your approval of {opened.id} is recorded: 1 of 2.", told.text
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.PENDING and record.approvers == [BOB]
    entries = await stack.runtime.store.list_audit(request_id=opened.id, limit=100)
    assert sorted(e.event for e in entries) == ["approval_added", "requested"]
    await stack.slack.wait_for(lambda: "1 of 2: <@U02BOB>" in _prompt_text(stack, opened))
    assert provider_writes(stack) == 0
    await click(stack, opened, CAROL)
    await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert provider_writes(stack) == 1


@pytest.mark.parametrize(
    ("user", "action_id", "method", "end"),
    [
        (BOB, "approve_request", "decide_approval", S.SUCCEEDED),
        (DAVE, "cancel_request", "transition", S.CANCELLED),
    ],
    ids=["approve-final", "cancel"],
)
async def test_a_decision_whose_commit_answer_is_lost_at_the_wire_is_shown_as_taken(
    stack: LocalStack,
    proxied: BotReplica,
    proxy: OutageProxy,
    user: str,
    action_id: str,
    method: str,
    end: RequestState,
) -> None:
    """The last approval needed, or the requester's cancel, commits at the server and its
    answer is lost: read back, it is carried on (sent once; the prompt redrawn without its
    buttons), and nobody is told "nothing was changed"."""
    opened = await open_direct(
        stack, DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    lost = lose_the_commit_answer_of(proxied.runtime.store, method, proxy)
    seen = len(stack.slack.ephemerals_for(user))
    await click(stack, opened, user, action_id, sender=proxied.sender)
    await lost()
    await wait_state(stack.runtime.store, opened.id, end)
    await stack.slack.wait_for(
        lambda: (
            (m := stack.slack.message(opened.channel, opened.prompt_ts or ""))
            and not buttons(m)
            and m
        )
    )
    assert provider_writes(stack) == (1 if end is S.SUCCEEDED else 0)
    told = [e.text for e in stack.slack.ephemerals_for(user)[seen:]]
    assert not any(STORE_UNAVAILABLE_TEXT in text for text in told), told


def _prompt_text(stack: LocalStack, opened: Opened) -> str:
    prompt = stack.slack.message(opened.channel, opened.prompt_ts or "")
    return readable_text(prompt) if prompt is not None else ""
