"""Refusals and validation errors: each answered to the person alone, saying why, with no
request to the provider that could change anything; refusals are in the audit trail."""

from __future__ import annotations

import pytest

from bot.local.demo.stack import DEMO_POLICY, LocalStack
from bot.slack.render.primitives import composed_text
from tests.conftest import StackFactory
from tests.support.slack_support import (
    bot_messages,
    opened_modal,
    provider_writes,
    refusals,
    whisper,
)


async def assert_refused(
    stack: LocalStack, user: str, channel: str, text: str, *, says: list[str], kind: str
) -> None:
    before = len(await refusals(stack, user))
    answer = await whisper(stack, user, channel, text)
    for words in says:
        assert words in answer.text, (words, answer.text)
    assert provider_writes(stack) == []
    assert bot_messages(stack, channel) == [], "a refusal must not be posted for everyone"
    entries = await refusals(stack, user)
    assert len(entries) == before + 1
    entry = entries[0]
    assert entry.outcome == kind
    assert composed_text(entry.detail["reason"]) == answer.text  # the audit has what they were told
    assert entry.detail["channel"] == channel
    assert await stack.runtime.store.list_requests() == []


async def test_no_grant_is_refused(sqlite_stack: LocalStack) -> None:
    await assert_refused(
        sqlite_stack,
        "U06MALLORY",
        "C0INCIDENT",
        "update together-prod tc-h100-reserved num_gpus=24",
        says=["no access", "together-prod"],
        kind="not_authorized",
    )
    await assert_refused(
        sqlite_stack,
        "U06MALLORY",
        "C0INCIDENT",
        "action e2e-delhi 101 restart_cluster",
        says=["no access", "e2e-delhi"],
        kind="not_authorized",
    )


async def test_a_viewer_cannot_update(sqlite_stack: LocalStack) -> None:
    await assert_refused(
        sqlite_stack,
        "U05ERIN",
        "C0INCIDENT",
        "update together-prod tc-h100-reserved num_gpus=24",
        says=["viewer", "operator"],
        kind="not_authorized",
    )


async def test_a_grant_holds_only_in_its_channels(sqlite_stack: LocalStack) -> None:
    await assert_refused(
        sqlite_stack,
        "U05ERIN",
        "C0RANDOM",
        "show together-prod tc-h100-reserved",
        says=["only in", "C0INCIDENT"],
        kind="not_authorized",
    )
    assert sqlite_stack.together.calls("get") == []


async def test_help_where_she_has_no_access_names_where_she_has(
    sqlite_stack: LocalStack,
) -> None:
    answer = await whisper(sqlite_stack, "U05ERIN", "C0RANDOM", "help")
    assert "no access to any project in this channel" in answer.text
    assert "your grants hold in <#C0INCIDENT>" in answer.text
    listed = await whisper(sqlite_stack, "U05ERIN", "C0RANDOM", "list")
    assert "(your grants hold in <#C0INCIDENT>)" in listed.text
    stranger = await whisper(sqlite_stack, "U06MALLORY", "C0RANDOM", "help")
    assert "Ask a gpuops admin for a grant" in stranger.text and "<#" not in stranger.text


async def test_a_cluster_outside_the_allowlist_is_refused(make_stack: StackFactory) -> None:
    policy = DEMO_POLICY.replace(
        "    notify_channel: C0GPUAUDIT\n  e2e-delhi:",
        '    notify_channel: C0GPUAUDIT\n    clusters: ["tc-h1*"]\n  e2e-delhi:',
    )
    assert policy != DEMO_POLICY
    stack = await make_stack(policy_yaml=policy)
    await assert_refused(
        stack,
        "U04DAVE",
        "C0INCIDENT",
        "update together-prod tc-h200-ondemand num_gpus=16",
        says=["tc-h200-ondemand", "allowlist"],
        kind="cluster_not_allowed",
    )
    await assert_refused(
        stack,
        "U01ALICE",
        "C0INCIDENT",
        "show together-prod tc-b200-pool",
        says=["tc-b200-pool", "allowlist"],
        kind="cluster_not_allowed",
    )
    assert stack.together.calls("get") == []
    listed = await whisper(stack, "U04DAVE", "C0INCIDENT", "list together-prod")
    assert "tc-h100-reserved" in listed.text and "tc-h100-sched" in listed.text
    assert "tc-h200-ondemand" not in listed.text and "tc-b200-pool" not in listed.text


async def test_an_unknown_project_is_refused(sqlite_stack: LocalStack) -> None:
    await assert_refused(
        sqlite_stack,
        "U01ALICE",
        "C0INCIDENT",
        "update staging tc-h100-reserved num_gpus=24",
        says=["staging"],
        kind="not_authorized",
    )


async def test_a_together_command_on_an_e2e_project_is_refused(sqlite_stack: LocalStack) -> None:
    await assert_refused(
        sqlite_stack,
        "U04DAVE",
        "C0INCIDENT",
        "update e2e-delhi 101 num_gpus=16",
        says=["e2e-delhi is an E2E project: use `/gpu action`"],
        kind="usage",
    )
    await assert_refused(
        sqlite_stack,
        "U04DAVE",
        "C0INCIDENT",
        "action together-prod tc-h100-reserved restart_cluster",
        says=["together-prod is a Together project: use `/gpu update`"],
        kind="usage",
    )


# -- validation (SPEC §1.1 and §1.2), command line only ----------------------------------------

# Two of the validation errors over HTTP (what the person is whispered, no form, no post);
# every one of them runs on the core harness: tests/core/test_commands.py.
VALIDATION = [
    pytest.param(
        "update together-prod tc-h100-reserved num_gpu=16",
        ["invalid change — num_gpu: not a field of update — did you mean num_gpus?"],
        id="near-miss-field",
    ),
    pytest.param(
        "action e2e-delhi 102 restart_cluster",
        ["Creating", "Running"],
        id="e2e-cluster-not-running",
    ),
]


@pytest.mark.parametrize(("text", "says"), VALIDATION)
async def test_validation_errors_are_specific_and_change_nothing(
    sqlite_stack: LocalStack, text: str, says: list[str]
) -> None:
    stack = sqlite_stack
    answer = await whisper(stack, "U04DAVE", "C0INCIDENT", text)
    for words in says:
        assert words in answer.text, (words, answer.text)
    assert provider_writes(stack) == []
    assert bot_messages(stack, "C0INCIDENT") == []
    assert stack.slack.views == {}, "a complete command line must not open a form"
    assert await stack.runtime.store.list_requests() == []
    [entry] = await refusals(stack, "U04DAVE")
    assert entry.outcome in ("invalid", "rule") and entry.detail["reason"]


async def test_an_empty_required_value_opens_the_form_instead(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    await stack.sender.command(
        "U04DAVE", "C0INCIDENT", "action e2e-delhi 101 update_ssh_keys ssh_key_ids="
    )
    view = await opened_modal(stack, "U04DAVE", "gpu_action")
    select = next(b for b in view.blocks if b.get("block_id") == "action")
    assert select["element"]["initial_option"]["value"] == "update_ssh_keys"
    assert any(b.get("block_id") == "ssh_key_ids" for b in view.blocks)
    assert provider_writes(stack) == []


async def test_usage_errors_are_ephemeral_and_show_the_usage(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    answer = await whisper(stack, "U04DAVE", "C0INCIDENT", "show together-prod")
    assert "Usage" in answer.text and "/gpu show" in answer.text
    answer = await whisper(stack, "U04DAVE", "C0INCIDENT", "scale everything")
    assert "unknown command" in answer.text and "/gpu update" in answer.text
    assert bot_messages(stack, "C0INCIDENT") == [] and provider_writes(stack) == []


async def test_a_mistyped_command_gets_the_one_it_was_meant_as(sqlite_stack: LocalStack) -> None:
    answer = await whisper(sqlite_stack, "U04DAVE", "C0INCIDENT", "lsit together-prod")
    assert (
        "unknown command `lsit` — did you mean `list`? Usage: `/gpu list [project] [page=N]`"
        in answer.text
    )
    assert bot_messages(sqlite_stack, "C0INCIDENT") == []


async def test_show_with_a_word_too_many_names_it(sqlite_stack: LocalStack) -> None:
    text = "show together-prod tc-h100-reserved extra"
    answer = await whisper(sqlite_stack, "U04DAVE", "C0INCIDENT", text)
    assert "unexpected extra word `extra` after the cluster id" in answer.text
    assert "Usage: `/gpu show &lt;project&gt; &lt;cluster_id&gt;`" in answer.text  # as sent
    assert "needs a project" not in answer.text
    assert bot_messages(sqlite_stack, "C0INCIDENT") == []


async def test_a_cluster_of_another_together_project_is_not_this_projects(
    sqlite_stack: LocalStack,
) -> None:
    """together-prod is Together project proj-123; tc-other-proj belongs to proj-999 (the
    same API key can reach it). It is not listed, so it cannot be shown or changed either."""
    stack = sqlite_stack
    assert stack.together.clusters["tc-other-proj"]["project_id"] == "proj-999"
    listed = await whisper(stack, "U04DAVE", "C0INCIDENT", "list together-prod")
    assert "tc-other-proj" not in listed.text
    shown = await whisper(stack, "U04DAVE", "C0INCIDENT", "show together-prod tc-other-proj")
    assert "tc-other-proj" in shown.text and "not found" in shown.text
    assert "other-team-h100" not in shown.text  # nothing about it is revealed
    changed = await whisper(
        stack, "U01ALICE", "C0INCIDENT", "update together-prod tc-other-proj num_gpus=16"
    )
    assert "not found" in changed.text
    await stack.runtime.workflow.drain()
    assert provider_writes(stack) == [] and await stack.runtime.store.list_requests() == []
    assert stack.together.clusters["tc-other-proj"]["num_gpus"] == 8
    assert bot_messages(stack, "C0INCIDENT") == []


async def test_a_malformed_e2e_cluster_id_is_answered(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    shown = await whisper(stack, "U04DAVE", "C0INCIDENT", "show e2e-delhi abc")
    assert "abc" in shown.text and "positive whole numbers" in shown.text
    action = await whisper(stack, "U04DAVE", "C0INCIDENT", "action e2e-delhi abc restart_cluster")
    assert "positive whole numbers" in action.text
    assert stack.e2e.requests == [] and await stack.runtime.store.list_requests() == []
    assert [e.outcome for e in await refusals(stack, "U04DAVE")] == ["invalid", "invalid"]
