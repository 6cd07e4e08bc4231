"""/gpu show, list, update, action and help over real HTTP: signed slash commands into the
bot's /slack/events, the fake Slack Web API, and both provider simulators."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bot.local.demo.stack import DEMO_POLICY, LocalStack
from bot.local.simulators.base import Fault, FaultKind
from bot.local.slack.models import Message
from tests.conftest import StackFactory
from tests.support.slack_support import (
    blocks_json,
    bot_messages,
    provider_writes,
    refusals,
    roots,
    whisper,
)

TOGETHER_PROD = ["tc-h100-reserved", "tc-h200-ondemand", "tc-b200-pool", "tc-h100-sched"]
E2E_DELHI = ["`101`", "`102`", "`103`", "`104`", "`105`", "`106`"]


# -- show ---------------------------------------------------------------------------------


async def test_show_together_posts_the_summary_in_the_channel(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    result = await stack.sender.command("U04DAVE", "C0INCIDENT", "show together-prod tc-b200-pool")
    assert result.status == 200 and result.acked_in_time
    posted = await stack.slack.wait_for(lambda: next(iter(bot_messages(stack, "C0INCIDENT")), None))
    assert posted.source == "response_url" and posted.thread_ts is None
    assert stack.slack.response_posts[-1].response_type == "in_channel"
    assert "train-b200-pool (tc-b200-pool)" in posted.text and "32 GPUs" in posted.text
    blocks = blocks_json(posted.blocks)
    for shown in ("B200_SXM", "32 total · 16 reserved", "pool-b200-1", "RESERVED", "<@U04DAVE>"):
        assert shown in blocks, shown
    assert stack.slack.ephemerals_for("U04DAVE") == []


async def test_show_e2e_posts_nodes_sku_and_location(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    await stack.sender.command("U04DAVE", "C0INCIDENT", "show e2e-delhi 101")
    posted = await stack.slack.wait_for(lambda: next(iter(bot_messages(stack, "C0INCIDENT")), None))
    assert "train-h100-a (101)" in posted.text and "Running" in posted.text
    assert "2 nodes" in posted.text
    blocks = blocks_json(posted.blocks)
    for shown in ("2 nodes", "H100", "Delhi", "GDC.8xH10080"):
        assert shown in blocks, shown
    assert provider_writes(stack) == []


# -- list ---------------------------------------------------------------------------------


async def test_list_is_ephemeral_and_covers_both_providers(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    answer = await whisper(stack, "U04DAVE", "C0INCIDENT", "list")
    shown = blocks_json(answer.blocks)
    assert "*together-prod*" in shown and "*e2e-delhi*" in shown
    for cluster in TOGETHER_PROD + E2E_DELHI:
        assert cluster in shown, cluster
    assert "tc-other-proj" not in shown  # another Together project's cluster
    assert "train-chennai-a" not in shown  # another E2E project's cluster
    assert bot_messages(stack, "C0INCIDENT") == []  # nothing posted for everyone

    only_e2e = await whisper(stack, "U04DAVE", "C0INCIDENT", "list e2e-delhi")
    assert "train-h100-a" in only_e2e.text and "tc-h100-reserved" not in only_e2e.text


async def test_list_shows_only_projects_the_user_may_view(make_stack: StackFactory) -> None:
    policy = DEMO_POLICY.replace(
        "projects: [together-prod, e2e-delhi]\n    role: operator",
        "projects: [e2e-delhi]\n    role: operator",
    )
    assert policy != DEMO_POLICY
    stack = await make_stack(policy_yaml=policy)
    answer = await whisper(stack, "U04DAVE", "C0INCIDENT", "list")
    assert "e2e-delhi" in answer.text + blocks_json(answer.blocks)
    assert "together-prod" not in blocks_json(answer.blocks)
    assert "tc-h100-reserved" not in answer.text
    assert stack.together.calls("list") == []  # not even asked

    refused = await whisper(stack, "U04DAVE", "C0INCIDENT", "list together-prod")
    assert "together-prod" in refused.text and "tc-h100" not in refused.text
    assert stack.together.calls("list") == []


async def test_a_viewer_limited_to_one_channel_sees_nothing_elsewhere(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    elsewhere = await whisper(stack, "U05ERIN", "C0RANDOM", "list")
    assert "no projects" in elsewhere.text
    assert "tc-h100-reserved" not in elsewhere.text and "train-h100-a" not in elsewhere.text
    assert stack.together.calls("list") == [] and stack.e2e.calls("list") == []

    show = await whisper(stack, "U05ERIN", "C0RANDOM", "show together-prod tc-h100-reserved")
    assert "C0INCIDENT" in show.text and "16 GPUs" not in show.text
    assert bot_messages(stack, "C0RANDOM") == []

    there = await whisper(stack, "U05ERIN", "C0INCIDENT", "list")
    assert "tc-h100-reserved" in there.text and "train-h100-a" in there.text


# -- a Together update, end to end ------------------------------------------------------------


async def test_together_update_end_to_end(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    answer = await whisper(
        stack, "U04DAVE", "C0INCIDENT", "update together-prod tc-h200-ondemand num_gpus=16"
    )
    await stack.runtime.workflow.drain()

    # The provider received exactly the field that was set.
    puts = stack.together.calls("update", "PUT")
    assert len(puts) == 1
    assert puts[0].path.endswith("/compute/clusters/tc-h200-ondemand")
    assert puts[0].body == {"num_gpus": 16}
    assert stack.together.clusters["tc-h200-ondemand"]["num_gpus"] == 16

    # One root message with the preview, edited to show the final state.
    [root] = roots(stack, "C0INCIDENT")
    request_id = root.text.rsplit(" ", 1)[-1]
    assert request_id.startswith("CR-") and request_id in answer.text
    first = root.edits[0] if root.edits else root
    assert "num_gpus 8 → 16" in first.text and "num_gpus 8 → 16" in blocks_json(first.blocks)
    assert "U04DAVE" in first.text and "tc-h200-ondemand" in first.text
    assert root.text.startswith("[done]") and "*done*" in blocks_json(root.blocks)

    # The result and the cluster summary are in the root's thread.
    replies = stack.slack.replies("C0INCIDENT", root.ts)
    assert replies and all(m.thread_ts == root.ts for m in replies)
    assert any("Together accepted the update" in m.text for m in replies)
    summary = _summary_in(replies, "infer-h200 (tc-h200-ondemand)")
    assert "16 GPUs" in summary.text
    assert "requested by <@U04DAVE>" in blocks_json(summary.blocks)
    assert request_id in blocks_json(summary.blocks)

    # Mirrored in the project's notify channel once, when it has run: who asked for what,
    # that it needed no approval, and how it ended.
    mirrors = [m.text for m in roots(stack, "C0GPUAUDIT") if request_id in m.text]
    assert len(mirrors) == 1, mirrors
    assert mirrors[0].startswith("Change done (no approval needed) — [done] <@U04DAVE>")
    assert "num_gpus 8 → 16" in mirrors[0]

    record = await stack.runtime.store.get_request(request_id)
    assert record is not None and str(record.state) == "succeeded"
    assert record.root_ts == root.ts
    events = [e.event for e in await stack.runtime.store.list_audit(request_id=request_id)]
    assert {"requested", "executing", "result"} <= set(events)


def _summary_in(messages: list[Message], title: str) -> Message:
    found = [m for m in messages if m.text.startswith(title)]
    assert found, f"no summary {title!r} in {[m.text for m in messages]}"
    return found[-1]


# -- E2E actions that need no approval -------------------------------------------------------


async def test_e2e_attach_ip_end_to_end(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    await whisper(
        stack, "U04DAVE", "C0INCIDENT", "action e2e-delhi 101 attach_ip reserved_ip_id=501"
    )
    await stack.runtime.workflow.drain()

    puts = stack.e2e.calls("action", "PUT")
    assert len(puts) == 1 and puts[0].path.endswith("/distributed_jobs_v2/cluster/101/")
    assert puts[0].body == {"action": "attach_ip", "reserved_ip_id": 501}
    assert stack.e2e.clusters[101].reserved_ip_ids == [501]
    # attach_ip answers with a reserved-IP object: the cluster is read again afterwards.
    routes = [(r.method, r.route) for r in stack.e2e.requests]
    assert ("GET", "get") in routes[routes.index(("PUT", "action")) + 1 :]

    [root] = roots(stack, "C0INCIDENT")
    assert root.text.startswith("[done]") and "attach_ip" in root.text
    replies = stack.slack.replies("C0INCIDENT", root.ts)
    assert all(m.thread_ts == root.ts for m in replies)
    assert any("Reserved IP attached" in m.text for m in replies)
    summary = _summary_in(replies, "train-h100-a (101)")
    assert "2 nodes" in summary.text and "Running" in summary.text


async def test_e2e_add_security_group_end_to_end(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    await whisper(
        stack,
        "U04DAVE",
        "C0INCIDENT",
        "action e2e-delhi 103 add_security_group security_groups_ids=602,603",
    )
    await stack.runtime.workflow.drain()

    [put] = stack.e2e.calls("action", "PUT")
    assert put.path.endswith("/cluster/103/")
    assert put.body == {"action": "add_security_group", "security_groups_ids": [602, 603]}
    assert stack.e2e.clusters[103].security_group_ids == [601, 602, 603]
    routes = [(r.method, r.route) for r in stack.e2e.requests]
    assert ("GET", "get") in routes[routes.index(("PUT", "action")) + 1 :]

    [root] = roots(stack, "C0INCIDENT")
    replies = stack.slack.replies("C0INCIDENT", root.ts)
    assert any("Security groups added successfully" in m.text for m in replies)
    summary = _summary_in(replies, "train-a100-small (103)")
    assert (
        "· 1 node" in summary.text
        and "1 nodes" not in summary.text
        and "A100" in blocks_json(summary.blocks)
    )
    assert root.text.startswith("[done]")


# -- help -----------------------------------------------------------------------------------


async def test_help_lists_only_what_the_user_may_do(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    viewer = (await whisper(stack, "U05ERIN", "C0INCIDENT", "help")).text
    assert "/gpu list" in viewer and "/gpu show" in viewer
    for hidden in ("/gpu update", "/gpu action", "/gpu audit", "Approve"):
        assert hidden not in viewer, hidden
    assert "viewer" in viewer

    operator = (await whisper(stack, "U04DAVE", "C0INCIDENT", "help")).text
    assert "/gpu update" in operator and "/gpu action" in operator
    assert "/gpu audit" not in operator and "Approve or deny" not in operator

    approver = (await whisper(stack, "U02BOB", "C0INCIDENT", "help")).text
    assert "Approve or deny" in approver and "/gpu audit" not in approver

    admin = (await whisper(stack, "U01ALICE", "C0INCIDENT", "")).text
    assert "/gpu audit" in admin and "/gpu update" in admin

    nobody = (await whisper(stack, "U06MALLORY", "C0INCIDENT", "help")).text
    assert "no access" in nobody and "/gpu" not in nobody
    assert "together-prod" not in nobody and "e2e-delhi" not in nobody


# -- health and metrics ----------------------------------------------------------------------


def _counter(metrics: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


async def test_healthz_and_metrics_count_a_refusal(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    async with httpx.AsyncClient(base_url=stack.base_url) as client:
        health = await client.get("/healthz")
        assert health.status_code == 200 and health.json() == {"ok": True}
        before = (await client.get("/metrics")).text
        await whisper(
            stack, "U06MALLORY", "C0INCIDENT", "update together-prod tc-h100-reserved num_gpus=24"
        )
        metrics = await client.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    labels = {"command": "update", "outcome": "refused"}
    assert "gpuops_commands_total" in metrics.text
    assert _counter(metrics.text, "gpuops_commands_total", **labels) == (
        _counter(before, "gpuops_commands_total", **labels) + 1
    )
    assert len(await refusals(stack, "U06MALLORY")) == 1


async def test_list_shows_the_other_provider_when_one_fails(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    stack.together.faults.add(
        Fault(route="list", kind=FaultKind.SERVER_ERROR, status=503, times=-1)
    )
    answer = await whisper(stack, "U04DAVE", "C0INCIDENT", "list")
    blocks = blocks_json(answer.blocks)
    assert "train-h100-a" in blocks  # E2E answered
    assert "*together-prod*" in blocks and "HTTP 503" in blocks  # Together's failure, named
    assert "tc-h100-reserved" not in blocks
