"""After a change: the cluster summary in the thread follows the cluster's status until it
is steady (SPEC §4.3.5), or not at all with follow-up off; and ``/metrics`` counts the
decisions and outcomes of change requests. Over HTTP on SQLite (two replicas on
PostgreSQL); the follow-up's logic on both backends: tests/core/test_followup.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bot.core.requests.followup import poll_lease
from bot.core.store import RequestState as S
from bot.local.demo.stack import LocalStack
from bot.local.simulators.base import Fault, FaultKind
from tests.conftest import StackFactory
from tests.support.workflow_kit import (
    BOB,
    CHANNEL,
    DAVE,
    click,
    deny,
    poll_until,
    readable_text,
    request,
    thread_texts,
    wait_mirror,
    wait_reply,
    wait_state,
    wait_summary,
)

SCALE_UP = "update together-prod tc-h200-ondemand num_gpus=16"  # needs no approval

# Longer than any test waits: a cluster provisions until a test sets it to 0.
PROVISIONING_HELD = 600.0


async def test_follow_up_edits_the_summary_until_the_cluster_is_ready(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(poll_seconds=0.2, transition_seconds=0.6, stepwise_transitions=True)
    opened = await request(stack, DAVE, SCALE_UP, approval=False)
    ready = await wait_reply(stack, opened, "infer-h200 is Ready.")
    record = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert record.summary_ts is not None
    summary = stack.slack.message(CHANNEL, record.summary_ts)
    assert summary is not None and summary.thread_ts == opened.root_ts
    edits = [c for c in stack.slack.calls_to("chat.update") if c.args.get("ts") == summary.ts]
    statuses = [v.text.split(" — ", 1)[1].split(" · ", 1)[0] for v in summary.versions]
    assert len(edits) >= 2 and len(summary.versions) == len(edits) + 1
    assert statuses[0] == "WaitingForDataPlaneNodes" and statuses[-1] == "Ready"
    assert "InstallingDrivers" in statuses
    assert "status as of" in readable_text(summary) and "16 GPUs" in summary.text
    assert ready.ts > summary.ts and float(ready.posted_at) >= float(summary.edited_at or 0)
    await stack.runtime.workflow.drain()  # the poller has stopped
    assert [m.text for m in stack.slack.replies(CHANNEL, opened.root_ts)].count(ready.text) == 1


async def test_no_follow_up_when_polling_is_off(stack: LocalStack) -> None:
    assert stack.runtime.settings.gpuops_poll_seconds == 0
    opened = await request(stack, DAVE, SCALE_UP, approval=False)
    record = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    await wait_mirror(stack, opened, "Change done")
    gets = len(stack.together.calls("get", "GET"))
    # the simulator finishes provisioning; a poller would have read the cluster meanwhile
    await poll_until(lambda: stack.together.view("tc-h200-ondemand")["status"] == "Ready")
    await stack.runtime.workflow.drain()
    assert len(stack.together.calls("get", "GET")) == gets
    summary = await wait_summary(stack, opened)
    assert summary.edits == [] and "WaitingFor" in summary.text
    assert record.summary_ts is None  # nothing follows it to edit it: not stored
    assert not any("is Ready" in t.text for t in stack.slack.replies(CHANNEL, opened.root_ts))


def scrape(
    stack: LocalStack, response: httpx.Response
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    assert response.status_code == 200
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


async def test_metrics_count_approval_decisions_expiries_and_outcomes(stack: LocalStack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url) as http:
        # The gauge belongs to the process, and an earlier test may have left it anywhere:
        # start it from this store (nothing pending), then it must come back to 0 by itself.
        await stack.runtime.workflow.refresh_pending_gauge()
        before = scrape(stack, await http.get("/metrics"))
        approved = await request(
            stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=1"
        )
        denied = await request(stack, DAVE, "action e2e-delhi 103 restart_workers")
        expired = await request(stack, DAVE, "action e2e-delhi 104 restart_cluster")
        failed = await request(stack, DAVE, "action e2e-delhi 105 restart_workers")
        await click(stack, approved, BOB)
        await deny(stack, denied, BOB)
        await wait_state(stack.runtime.store, approved.id, S.SUCCEEDED)
        stack.e2e.faults.add(Fault(route="action", kind=FaultKind.SERVER_ERROR, status=400))
        await click(stack, failed, BOB)
        await wait_state(stack.runtime.store, failed.id, S.FAILED)
        await wait_state(stack.runtime.store, denied.id, S.DENIED)
        stack.runtime.workflow.clock = lambda: datetime.now(UTC) + timedelta(hours=1)
        assert await stack.runtime.workflow.expire_due() == 1
        await wait_state(stack.runtime.store, expired.id, S.EXPIRED)
        for opened, word in ((approved, "done"), (failed, "failed")):
            await wait_mirror(stack, opened, f"Change {word}")
        after = scrape(stack, await http.get("/metrics"))

    def delta(name: str, **labels: str) -> float:
        key = (name, frozenset(labels.items()))
        return after.get(key, 0.0) - before.get(key, 0.0)

    decisions = "gpuops_approval_decisions_total"
    assert delta(decisions, decision="approved") == 2  # the 400 was approved, then failed
    assert delta(decisions, decision="denied") == 1
    assert delta(decisions, decision="expired") == 1
    outcomes = "gpuops_change_requests_total"
    assert delta(outcomes, provider="e2e", outcome="succeeded") == 1
    assert delta(outcomes, provider="e2e", outcome="failed") == 1
    assert delta(outcomes, provider="e2e", outcome="denied") == 1
    assert delta(outcomes, provider="e2e", outcome="expired") == 1
    assert before[("gpuops_approvals_pending", frozenset())] == 0
    assert after[("gpuops_approvals_pending", frozenset())] == 0


async def test_a_follow_up_resumes_after_a_restart_and_ends_once(
    make_stack: StackFactory,
) -> None:
    # The cluster provisions until the test lets it finish: the restart below must come
    # before it is Ready, however slow the machine.
    stack = await make_stack(poll_seconds=0.2, transition_seconds=PROVISIONING_HELD)
    opened = await request(stack, DAVE, SCALE_UP, approval=False)
    record = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert record.summary_ts is not None
    summary = stack.slack.message(CHANNEL, record.summary_ts)
    assert summary is not None
    await stack.slack.wait_for(lambda: summary.edits or None)  # the first poll was shown
    followed = await stack.runtime.store.get_request(opened.id)
    assert followed is not None and followed.follow_until is not None
    await stack.restart_bot(instance_id="demo-2")  # before the cluster is Ready
    stack.together.transition_seconds = 0.0  # now it gets there at the next look
    ready = await wait_reply(stack, opened, "infer-h200 is Ready.")
    assert "status as of" in readable_text(stack.slack.message(CHANNEL, summary.ts))  # type: ignore[arg-type]
    await stack.runtime.workflow.drain()
    assert thread_texts(stack, opened).count(ready.text) == 1
    ended = await stack.runtime.store.get_request(opened.id)
    assert ended is not None and ended.follow_until is None


async def test_two_replicas_follow_a_change_once(
    pg_database_url: str, make_stack: StackFactory
) -> None:
    stack = await make_stack(
        database_url=pg_database_url, poll_seconds=0.2, transition_seconds=PROVISIONING_HELD
    )
    opened = await request(stack, DAVE, SCALE_UP, approval=False)
    await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)

    async def followed() -> bool:
        record = await stack.runtime.store.get_request(opened.id)
        return record is not None and record.follow_until is not None

    await poll_until(followed)  # recorded as followed: a replica's sweep can find it
    # The replica's sweep is run here, not by its own loop, so that this resume is its
    # only one (a looping sweep's could still hold the request when it is counted).
    replica = await stack.start_replica("demo-2", start_background=False)
    assert await replica.runtime.workflow.follow_up.resume() == 1  # it finds the follow-up
    await replica.runtime.workflow.drain()  # it did not get the poll lease: it stopped
    lease = await stack.runtime.store.get_lease(poll_lease(opened.id))
    assert lease is not None and lease.holder == "demo-1"
    stack.together.transition_seconds = 0.0  # the cluster gets there at the next look
    ready = await wait_reply(stack, opened, "infer-h200 is Ready.")
    await stack.runtime.workflow.drain()
    assert thread_texts(stack, opened).count(ready.text) == 1
    assert await replica.runtime.workflow.follow_up.resume() == 0  # ended: nothing to resume
