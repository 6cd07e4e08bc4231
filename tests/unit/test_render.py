"""Rendering: escaping of user and provider text everywhere, summaries, prompts, modals."""

from __future__ import annotations

import json

from bot.core.answers import HelpCard
from bot.core.policy import Role
from bot.core.requests.view import RequestView
from bot.providers.base import ClusterSummary, Fact, FieldSpec
from bot.slack.render import answers, clusters, forms, primitives, requests
from tests.support.catalog import CATALOG, CHANGES

HOSTILE = "<!channel> <@U0EVIL> <https://evil.example|click me> & <!here>"


def _all_text(message: primitives.SlackMessage) -> str:
    return message.text + json.dumps(message.blocks)


def _assert_inert(blob: str) -> None:
    for needle in ("<!channel>", "<@U0EVIL>", "<https://evil", "<!here>"):
        assert needle not in blob


def _together(**kw: object) -> ClusterSummary:
    base: dict[str, object] = dict(
        provider="together",
        project="together-prod",
        cluster_id="tc-1",
        name="prod",
        status="Ready",
        steady=True,
        gpu_type="H100_SXM",
        region="us-central-8",
        billing="RESERVED",
        size="16 GPUs",
        facts=(
            Fact(label="GPUs", value="16 total · 16 reserved"),
            Fact(label="Region", value="us-central-8"),
        ),
    )
    base.update(kw)
    return ClusterSummary.model_validate(base)


def test_escape_neutralises_slack_control_sequences() -> None:
    assert primitives.escape(HOSTILE) == (
        "&lt;!channel&gt; &lt;@U0EVIL&gt; &lt;https://evil.example|click me&gt; &amp; &lt;!here&gt;"
    )


def test_summary_escapes_provider_text_in_blocks_and_fallback() -> None:
    message = clusters.cluster_summary(
        _together(
            name=HOSTILE,
            status=HOSTILE,
            size=HOSTILE,
            facts=(Fact(label=HOSTILE, value=HOSTILE),),
        ),
        requested_by="U01ALICE",
        note=HOSTILE,
    )
    _assert_inert(_all_text(message))
    assert "<@U01ALICE>" in json.dumps(message.blocks)  # a real user id is still a mention


def test_summary_shows_the_provider_facts_in_order_whatever_the_provider() -> None:
    facts = (
        ("Nodes / GPUs", "2 nodes · 16 x H100"),
        ("CPUs / memory", "416 CPUs · 4000 GB"),
        ("Image", "Ubuntu Slurm v2"),
        ("SKU", "GDC.8xH100"),
        ("Region", "Delhi"),
        ("Billing", "hourly"),
    )
    s = ClusterSummary(
        provider="e2e",
        project="e2e-delhi",
        cluster_id="101",
        name="train",
        status="Running",
        steady=False,
        size="2 nodes",
        facts=tuple(Fact(label=label, value=value) for label, value in facts),
    )
    message = clusters.cluster_summary(s)
    assert clusters.summary_pairs(s) == [
        ("Status", "Running (changing)"),
        ("Provider / project", "e2e / e2e-delhi"),
        *facts,
    ]
    blob = json.dumps(message.blocks, ensure_ascii=False)
    for label, value in facts:
        assert f"*{label}*" in blob and value in blob
    assert message.text.endswith("· e2e/e2e-delhi · 2 nodes")
    listing = clusters.cluster_list({"e2e-delhi": [s]})
    assert "• `101` train — Running · 2 nodes · —" in listing.text


def test_user_ref_only_mentions_real_ids() -> None:
    assert primitives.user_ref("U01ALICE") == "<@U01ALICE>"
    assert primitives.user_ref("<!channel>") == "&lt;!channel&gt;"


def _request(**kw: object) -> RequestView:
    base: dict[str, object] = dict(
        id="CR-ABC123",
        state="pending",
        provider="together",
        project="together-prod",
        cluster_id="tc-1",
        cluster_name="prod",
        action="update",
        preview=["num_gpus 8 → 16"],
        requester="U01DAVE",
        channel="C0INCIDENT",
        needs_approval=True,
    )
    base.update(kw)
    return RequestView(**base)  # type: ignore[arg-type]


def test_request_root_escapes_reason_and_preview() -> None:
    message = requests.request_root(
        _request(reason=HOSTILE, cluster_name=HOSTILE, preview=[HOSTILE])
    )
    _assert_inert(_all_text(message))
    assert "CR-ABC123" in message.text


def test_request_root_shows_state() -> None:
    assert "pending approval" in requests.request_root(_request()).text
    done = requests.request_root(_request(state="succeeded", decided_by="U02BOB"))
    assert "done" in done.text and "<@U02BOB>" in json.dumps(done.blocks)


def test_approval_prompt_has_the_three_buttons_with_the_request_id() -> None:
    prompt = requests.approval_prompt(_request(), expire_minutes=30)
    buttons = [e for b in prompt.blocks if b["type"] == "actions" for e in b["elements"]]
    assert [(b["action_id"], b["value"]) for b in buttons] == [
        ("approve_request", "CR-ABC123"),
        ("deny_request", "CR-ABC123"),
        ("cancel_request", "CR-ABC123"),
    ]


def test_update_modal_uses_field_names_as_block_and_action_ids_and_prefills() -> None:
    specs = [
        FieldSpec(name="num_gpus", label="GPUs", kind="int"),
        FieldSpec(
            name="cluster_type", label="Type", kind="choice", choices=("KUBERNETES", "SLURM")
        ),
    ]
    view = forms.update_modal(
        _together(),
        specs,
        {"num_gpus": 16, "cluster_type": "SLURM"},
        {"project": "p", "cluster_id": "c", "channel": "C1"},
        title="Update cluster",
    )
    assert view["callback_id"] == "gpu_update"
    assert view["title"]["text"] == "Update cluster"
    inputs = {b["block_id"]: b for b in view["blocks"] if b["type"] == "input"}
    assert inputs["num_gpus"]["element"]["action_id"] == "num_gpus"
    assert inputs["num_gpus"]["element"]["initial_value"] == "16"
    assert inputs["cluster_type"]["element"]["initial_option"]["value"] == "SLURM"
    assert json.loads(view["private_metadata"]) == {
        "project": "p",
        "cluster_id": "c",
        "channel": "C1",
    }


def test_action_modal_has_the_action_select_and_the_actions_fields() -> None:
    specs = [FieldSpec(name="additional_nodes", label="Nodes to add", kind="int", required=True)]
    view = forms.action_modal(
        _together(provider="e2e"),
        ["restart_cluster", "scale_cluster"],
        "scale_cluster",
        specs,
        {},
        {"project": "e"},
        title="Cluster action",
    )
    assert view["callback_id"] == "gpu_action"
    blocks = {b.get("block_id"): b for b in view["blocks"]}
    assert blocks["action"]["element"]["action_id"] == "action"
    assert blocks["action"]["element"]["initial_option"]["value"] == "scale_cluster"
    assert blocks["additional_nodes"]["optional"] is False


def test_cluster_list_reports_a_failed_project_without_hiding_others() -> None:
    message = clusters.cluster_list({"a": [_together()], "b": "together: timeout"})
    blob = json.dumps(message.blocks)
    assert "tc-1" in blob and "together: timeout" in blob


def test_composed_notices_link_bare_channels_but_nothing_else() -> None:
    message = primitives.error(f"your grant holds only in <#C0INCIDENT> — ask there. {HOSTILE}")
    assert "<#C0INCIDENT>" in message.text
    _assert_inert(_all_text(message))
    spoof = primitives.error("<#C0INCIDENT|click-me> <#C0X><@U0EVIL>")
    assert "<#C0INCIDENT|" not in spoof.text and "<@U0EVIL>" not in spoof.text


def test_help_lists_what_each_provider_says_it_can_change() -> None:
    text = answers.help_message(
        HelpCard(roles={"together-prod": Role.operator}, changes=CHANGES)
    ).text
    together, e2e = CATALOG.provider_changes()["together"], CATALOG.provider_changes()["e2e"]
    assert (
        '`/gpu update <project> <cluster_id> [field=value …] [reason="…"]` — Together: '
        + ", ".join(together.field_names())
        + " (no fields: a form)"
    ) in text
    assert (
        '`/gpu action <project> <cluster_id> [<action>] [field=value …] [reason="…"]` — E2E: '
        + ", ".join(e2e.actions)
        + " (missing: a form)"
    ) in text
    for name in [*together.field_names(), *e2e.actions]:
        assert name in text
    viewer = answers.help_message(
        HelpCard(roles={"together-prod": Role.viewer}, changes=CHANGES)
    ).text
    assert "/gpu update" not in viewer and "/gpu action" not in viewer
