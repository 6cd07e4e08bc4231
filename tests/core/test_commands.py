"""What CommandService answers, on the core harness: every validation error of a complete
command line is specific, refused alone, audited and changes nothing (the matrix that ran
over HTTP); missing fields ask for a form; a change command on the wrong provider; the
audit trail for admins only; a store that cannot be reached refuses what needs it."""

from __future__ import annotations

import pytest

from bot.core.answers import STORE_UNAVAILABLE_TEXT, AuditListing, ClusterCard, Reply
from bot.core.ask.forms import FormRequest
from bot.core.store import StoreUnavailable
from tests.support.core_harness import ALICE, BOB, DAVE, ERIN, MALLORY, Core, reply_text
from tests.support.reliability import StoreOutage

VALIDATION = [
    pytest.param(
        "update together-prod tc-h100-reserved num_preemptible_gpus=12",
        ["num_preemptible_gpus", "multiple of 8", "12"],
        id="preemptible-not-multiple-of-8",
    ),
    pytest.param(
        "update together-prod tc-b200-pool num_capacity_pool_gpus=12",
        ["num_capacity_pool_gpus", "multiple of 8"],
        id="capacity-pool-not-multiple-of-8",
    ),
    pytest.param(
        "update together-prod tc-b200-pool num_capacity_pool_gpus=40",
        ["num_capacity_pool_gpus", "cannot exceed num_gpus", "32"],
        id="capacity-pool-above-num-gpus",
    ),
    pytest.param(
        "update together-prod tc-b200-pool num_gpus=16 num_capacity_pool_gpus=24",
        ["num_capacity_pool_gpus", "cannot exceed num_gpus", "16"],
        id="capacity-pool-above-resulting-num-gpus",
    ),
    pytest.param(
        "update together-prod tc-h100-reserved num_capacity_pool_gpus=8",
        ["num_capacity_pool_gpus", "capacity_pool_id"],
        id="capacity-pool-without-a-pool",
    ),
    pytest.param(
        "update together-prod tc-h200-ondemand num_reserved_gpus=8",
        ["num_reserved_gpus", "RESERVED", "ON_DEMAND"],
        id="reserved-on-a-non-reserved-cluster",
    ),
    pytest.param(
        "update together-prod tc-h200-ondemand reservation_end_time=2030-01-01T00:00:00Z",
        ["reservation_end_time", "prepaid", "ON_DEMAND"],
        id="end-time-on-on-demand",
    ),
    pytest.param(
        "update together-prod tc-h100-reserved reservation_end_time=2020-01-01T00:00:00Z",
        ["reservation_end_time", "in the future", "2020-01-01T00:00:00Z"],
        id="end-time-in-the-past",
    ),
    pytest.param(
        "update together-prod tc-h100-reserved num_gpus=lots",
        ["num_gpus", "whole number", "lots"],
        id="unparseable-integer",
    ),
    pytest.param(
        "update together-prod tc-h100-reserved reservation_end_time=tomorrow",
        ["reservation_end_time", "RFC 3339", "tomorrow"],
        id="unparseable-time",
    ),
    pytest.param(
        "update together-prod tc-h100-reserved cluster_type=WINDOWS",
        ["cluster_type", "KUBERNETES or SLURM", "WINDOWS"],
        id="unparseable-cluster-type",
    ),
    pytest.param(
        "update together-prod tc-h100-reserved colour=blue",
        ["invalid change — colour: not a field of update (fields: cluster_type, num_gpus"],
        id="unknown-field",
    ),
    pytest.param(
        "update together-prod tc-h100-reserved num_gpu=16",
        ["invalid change — num_gpu: not a field of update — did you mean num_gpus?"],
        id="near-miss-field",
    ),
    pytest.param(
        "action e2e-delhi 101 scale_cluster nodes=3",
        ["invalid change — nodes: not a field of scale_cluster — did you mean additional_nodes?"],
        id="e2e-unknown-field-where-a-form-would-open",
    ),
    pytest.param(
        "action e2e-delhi 101 restart_workers nodes=3",
        ["invalid change — nodes: not a field of restart_workers (fields: none)"],
        id="e2e-unknown-field-of-an-action-without-fields",
    ),
    pytest.param(
        "action e2e-delhi 101 nodes=3",
        ["invalid change — nodes: not a field of any e2e action — did you mean additional_nodes?"],
        id="e2e-unknown-field-without-an-action",
    ),
    pytest.param(
        "update together-prod tc-h100-reserved num_gpus=16",
        ["nothing would change", "num_gpus is already 16"],
        id="no-change",
    ),
    pytest.param(
        "action e2e-delhi 102 restart_cluster",
        ["Creating", "Running"],
        id="e2e-cluster-not-running",
    ),
    pytest.param(
        "action e2e-delhi 101 scale_cluster additional_nodes=0",
        ["additional_nodes", "at least 1", "got 0"],
        id="e2e-additional-nodes-zero",
    ),
    pytest.param(
        "action e2e-delhi 101 update_ssh_keys ssh_key_ids=,",
        ["ssh_key_ids", "at least one"],
        id="e2e-empty-ssh-key-ids",
    ),
    pytest.param(
        "action e2e-delhi 101 scale_cluster additional_nodes=two",
        ["additional_nodes", "two"],
        id="e2e-unparseable-integer",
    ),
    pytest.param(
        "action e2e-delhi 101 reboot_everything",
        ["unknown action", "reboot_everything", "scale_cluster"],
        id="e2e-unknown-action",
    ),
]


@pytest.mark.parametrize(("text", "says"), VALIDATION)
async def test_validation_errors_are_specific_and_change_nothing(
    core: Core, text: str, says: list[str]
) -> None:
    outcome = await core.command(DAVE, text)
    assert isinstance(outcome, Reply), "a complete command line must not open a form"
    assert not outcome.public, "a refusal is for the person alone"
    answer = reply_text(outcome)
    for words in says:
        assert words in answer, (words, answer)
    assert core.together.script.of("apply") == [] and core.e2e.script.of("apply") == []
    assert core.notifier.told == []  # nothing shown to anyone else
    assert await core.store.list_requests() == []
    [entry] = await core.store.list_audit(limit=5)
    assert (entry.actor, entry.event) == (DAVE, "refused")
    assert entry.outcome in ("invalid", "rule") and entry.detail["reason"]
    assert entry.detail["channel"] == "C0INCIDENT"


@pytest.mark.parametrize(
    ("user", "channel", "text", "says", "kind"),
    [
        (
            MALLORY,
            "C0INCIDENT",
            "update together-prod tc-h100-reserved num_gpus=24",
            "no access",
            "not_authorized",
        ),
        (
            MALLORY,
            "C0INCIDENT",
            "action e2e-delhi 101 restart_cluster",
            "no access",
            "not_authorized",
        ),
        (
            ERIN,
            "C0INCIDENT",
            "update together-prod tc-h100-reserved num_gpus=24",
            "you are viewer",
            "not_authorized",
        ),
        (ERIN, "C0RANDOM", "show together-prod tc-h100-reserved", "only in", "not_authorized"),
        (
            ALICE,
            "C0INCIDENT",
            "update staging tc-h100-reserved num_gpus=24",
            "staging",
            "not_authorized",
        ),
        (
            DAVE,
            "C0INCIDENT",
            "update e2e-delhi 101 num_gpus=16",
            "e2e-delhi is an E2E project: use `/gpu action`",
            "usage",
        ),
        (
            DAVE,
            "C0INCIDENT",
            "action together-prod tc-h100-reserved restart_cluster",
            "together-prod is a Together project: use `/gpu update`",
            "usage",
        ),
    ],
)
async def test_a_refused_command_says_why_and_is_audited(
    core: Core, user: str, channel: str, text: str, says: str, kind: str
) -> None:
    assert says in await core.answer(user, text, channel)
    [entry] = await core.store.list_audit(limit=5)
    assert (entry.actor, entry.outcome) == (user, kind) and entry.detail["channel"] == channel
    assert entry.detail["command"] == text
    assert await core.store.list_requests() == []
    assert core.together.script.of("apply") == [] and core.e2e.script.of("apply") == []


async def test_a_refusal_by_grant_asks_the_provider_nothing(core: Core) -> None:
    await core.answer(ERIN, "show together-prod tc-h100-reserved", "C0RANDOM")
    assert core.together.script.calls == []


@pytest.mark.parametrize(
    ("text", "kind", "action", "prefill"),
    [
        ("update together-prod tc-h200-ondemand", "single", None, {}),
        ("action e2e-delhi 101 scale_cluster", "choice", "scale_cluster", {}),
        ("action e2e-delhi 101 update_ssh_keys ssh_key_ids=", "choice", "update_ssh_keys", {}),
    ],
)
async def test_a_change_without_its_fields_asks_for_a_form(
    core: Core, text: str, kind: str, action: str | None, prefill: dict[str, str]
) -> None:
    form = await core.command(DAVE, text)
    assert isinstance(form, FormRequest), form
    assert form.kind == kind and form.channel == "C0INCIDENT"
    if action is not None:
        assert form.action == action
    assert await core.store.list_requests() == []
    assert core.e2e.script.of("apply") == [] and core.together.script.of("apply") == []


async def test_usage_errors_show_the_usage(core: Core) -> None:
    usage = await core.answer(DAVE, "show together-prod")
    assert "Usage" in usage and "/gpu show" in usage
    unknown = await core.answer(DAVE, "scale everything")
    assert "unknown command" in unknown and "/gpu update" in unknown


async def test_the_audit_trail_is_shown_to_admins_only(any_core: Core) -> None:
    core = any_core
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"})
    await core.deny(BOB, opened.id)
    listing = await core.command(ALICE, "audit e2e-delhi")
    assert isinstance(listing, Reply) and isinstance(listing.content, AuditListing)
    shown = [(e.event, e.request_id, e.outcome) for e in listing.content.entries]
    assert ("denied", opened.id, "denied") in shown and ("requested", opened.id, "pending") in shown
    for user, command, why in (
        (BOB, "audit", "reading the audit trail needs the admin role"),
        (BOB, "audit e2e-delhi", "you are approver on e2e-delhi"),
        (DAVE, "audit", "reading the audit trail needs the admin role"),
    ):
        refused = await core.answer(user, command)
        assert why in refused and opened.id not in refused


async def test_a_mention_answers_show_and_points_changes_to_the_command(core: Core) -> None:
    shown = await core.ops.handle_mention(DAVE, "C0INCIDENT", "show e2e-delhi 101")
    assert isinstance(shown, Reply) and isinstance(shown.content, ClusterCard)
    assert shown.content.summary.name == "train-h100-a"
    told = reply_text(await core.ops.handle_mention(DAVE, "C0INCIDENT", "update together-prod x"))
    assert "use `/gpu update …` in the channel" in told
    assert core.together.script.calls == []


async def test_with_the_store_down_a_change_is_refused_and_a_read_is_answered(
    core: Core,
) -> None:
    outage = StoreOutage(core.store)
    outage.start()
    refused = await core.answer(DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=1")
    assert refused == STORE_UNAVAILABLE_TEXT
    shown = await core.command(DAVE, "show e2e-delhi 101")  # read-only: from the provider
    assert isinstance(shown, Reply) and isinstance(shown.content, ClusterCard)
    assert await core.ops.first_delivery("command:1", "show e2e-delhi 101")
    with pytest.raises(StoreUnavailable):
        await core.ops.first_delivery("command:2", "action e2e-delhi 101 restart_workers")
    outage.end()
    assert core.e2e.script.of("apply") == []
    assert await core.store.list_requests() == []
