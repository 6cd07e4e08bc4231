"""The gpu_update and gpu_action modals over real HTTP: views.open → views.update with the
cluster's current values, dispatch of the action select, submissions answered with
``response_action: errors`` or turned into change requests."""

from __future__ import annotations

import json

from bot.local.demo.stack import LocalStack
from bot.local.simulators.base import Fault, FaultKind
from tests.support.slack_support import (
    blocks_json,
    input_block,
    opened_modal,
    provider_writes,
    roots,
    updated_modal,
    whisper,
)

TOGETHER_FIELDS = [
    "cluster_type",
    "num_gpus",
    "num_reserved_gpus",
    "num_preemptible_gpus",
    "num_capacity_pool_gpus",
    "reservation_end_time",
]


async def test_update_without_fields_opens_a_prefilled_gpu_update_modal(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    result = await stack.sender.command(
        "U04DAVE", "C0INCIDENT", "update together-prod tc-h100-reserved"
    )
    assert result.status == 200 and result.acked_in_time
    view = await opened_modal(stack, "U04DAVE", "gpu_update")

    methods = [c.method for c in stack.slack.calls if c.method.startswith("views.")]
    assert methods == ["views.open", "views.update"]
    assert stack.slack.calls_to("views.update")[0].args["view_id"] == view.id
    metadata = json.loads(view.private_metadata)
    assert {k: metadata[k] for k in ("project", "cluster_id", "channel")} == {
        "project": "together-prod",
        "cluster_id": "tc-h100-reserved",
        "channel": "C0INCIDENT",
    }
    assert metadata["shown"]["num_gpus"] == "16"  # what the form was prefilled with
    cluster = stack.together.clusters["tc-h100-reserved"]
    for name in TOGETHER_FIELDS:
        block = input_block(view, name)
        assert block["type"] == "input" and block["element"]["action_id"] == name
    assert input_block(view, "num_gpus")["element"]["initial_value"] == "16"
    assert input_block(view, "num_reserved_gpus")["element"]["initial_value"] == "16"
    assert input_block(view, "num_preemptible_gpus")["element"]["initial_value"] == "0"
    assert input_block(view, "cluster_type")["element"]["initial_option"]["value"] == "KUBERNETES"
    end = input_block(view, "reservation_end_time")["element"]["initial_value"]
    assert end == cluster["reservation_end_time"]
    assert "train-h100-reserved" in blocks_json(view.blocks)
    # the button says what it does: there is no preview step before the request
    assert view.view["submit"]["text"] == "Request change"
    assert "Preview" not in json.dumps(view.view)
    assert "any other runs at once" in blocks_json(view.blocks)
    assert provider_writes(stack) == [] and stack.slack.ephemerals == []


async def test_update_modal_submissions(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    await stack.sender.command("U04DAVE", "C0INCIDENT", "update together-prod tc-h100-reserved")
    view = await opened_modal(stack, "U04DAVE", "gpu_update")

    # Nothing changed: every prefilled input left as it was.
    unchanged = await stack.sender.view_submission("U04DAVE", view.id, {})
    assert unchanged.status == 200 and unchanged.problems == ()
    assert unchanged.json["response_action"] == "errors"
    assert "Nothing changed" in " ".join(unchanged.json["errors"].values())
    assert stack.slack.views[view.id].open

    # An invalid value: the error sits under that input.
    invalid = await stack.sender.view_submission("U04DAVE", view.id, {"num_preemptible_gpus": "12"})
    assert invalid.json["response_action"] == "errors" and invalid.problems == ()
    assert list(invalid.json["errors"]) == ["num_preemptible_gpus"]
    assert "multiple of 8" in invalid.json["errors"]["num_preemptible_gpus"]

    unparseable = await stack.sender.view_submission(
        "U04DAVE", view.id, {"num_preemptible_gpus": "8", "reservation_end_time": "tomorrow"}
    )
    assert list(unparseable.json["errors"]) == ["reservation_end_time"]
    assert provider_writes(stack) == []

    # One field changed (the rest prefilled as they were): only that field is sent.
    end_time = input_block(view, "reservation_end_time")["element"]["initial_value"]
    accepted = await stack.sender.view_submission(
        "U04DAVE",
        view.id,
        {
            "num_preemptible_gpus": "8",
            "reservation_end_time": end_time,  # back to the prefilled value
            "reason": "burst capacity for the eval run",
        },
    )
    assert accepted.status == 200 and accepted.json is None
    assert not stack.slack.views[view.id].open
    confirmation = await stack.slack.wait_for(
        lambda: next(iter(stack.slack.ephemerals_for("U04DAVE")), None)
    )
    await stack.runtime.workflow.drain()
    assert confirmation.channel == "C0INCIDENT" and "CR-" in confirmation.text
    [put] = stack.together.calls("update", "PUT")
    assert put.body == {"num_preemptible_gpus": 8}
    [root] = roots(stack, "C0INCIDENT")
    assert "num_preemptible_gpus 0 → 8" in root.text
    assert "burst capacity for the eval run" in blocks_json(root.blocks)


async def test_action_modal_select_then_submit_creates_a_request(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    await stack.sender.command("U04DAVE", "C0INCIDENT", "action e2e-delhi 101")
    view = await opened_modal(stack, "U04DAVE", "gpu_action")
    metadata = json.loads(view.private_metadata)
    assert {k: metadata[k] for k in ("project", "cluster_id", "channel")} == {
        "project": "e2e-delhi",
        "cluster_id": "101",
        "channel": "C0INCIDENT",
    }
    select = input_block(view, "action")
    assert select["element"]["action_id"] == "action" and select.get("dispatch_action") is True
    options = [o["value"] for o in select["element"]["options"]]
    assert "scale_cluster" in options and "attach_ip" in options and len(options) == 9
    assert "additional_nodes" not in [b.get("block_id") for b in view.blocks]

    versions = len(view.history)
    result = await stack.sender.view_block_action(
        "U04DAVE", view.id, action_id="action", block_id="action", selected_value="scale_cluster"
    )
    assert result is not None and result.status == 200
    view = await updated_modal(stack, view.id, versions)
    nodes = input_block(view, "additional_nodes")
    assert nodes["element"]["action_id"] == "additional_nodes" and nodes["optional"] is False
    assert input_block(view, "action")["element"]["initial_option"]["value"] == "scale_cluster"

    submitted = await stack.sender.view_submission("U04DAVE", view.id, {"additional_nodes": "2"})
    assert submitted.status == 200 and submitted.json is None
    confirmation = await stack.slack.wait_for(
        lambda: next(iter(stack.slack.ephemerals_for("U04DAVE")), None)
    )
    assert confirmation.source == "chat.postEphemeral" and confirmation.channel == "C0INCIDENT"
    assert "waiting for approval" in confirmation.text
    assert "scale_cluster: 2 → 4 nodes" in confirmation.text

    [request] = await stack.runtime.store.list_requests()
    assert str(request.state) == "pending" and request.action == "scale_cluster"
    assert request.plan["plan"]["body"] == {"action": "scale_cluster", "additional_nodes": 2}
    [root] = roots(stack, "C0INCIDENT")
    assert "scale_cluster: 2 → 4 nodes" in root.text and request.id in root.text
    prompt = stack.slack.replies("C0INCIDENT", root.ts)
    assert any("approve_request" in blocks_json(m.blocks) for m in prompt)
    assert provider_writes(stack) == []  # waits for a second person


async def test_action_with_a_missing_field_opens_the_modal_preselected(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    await stack.sender.command("U04DAVE", "C0INCIDENT", "action e2e-delhi 101 scale_cluster")
    view = await opened_modal(stack, "U04DAVE", "gpu_action")
    assert input_block(view, "action")["element"]["initial_option"]["value"] == "scale_cluster"
    assert input_block(view, "additional_nodes")["element"]["action_id"] == "additional_nodes"
    assert stack.slack.ephemerals == [] and provider_writes(stack) == []

    zero = await stack.sender.view_submission("U04DAVE", view.id, {"additional_nodes": "0"})
    assert zero.json["response_action"] == "errors"
    assert list(zero.json["errors"]) == ["additional_nodes"] and zero.problems == ()
    assert await stack.runtime.store.list_requests() == []


async def test_a_viewer_gets_a_refusal_in_the_form_and_in_the_channel(
    sqlite_stack: LocalStack,
) -> None:
    """Forms first: the form opens before the group look-up; the refusal then replaces it."""
    stack = sqlite_stack
    answer = await whisper(stack, "U05ERIN", "C0INCIDENT", "update together-prod tc-h100-reserved")
    assert "viewer" in answer.text and "operator" in answer.text
    (view,) = stack.slack.views.values()
    shown = await stack.slack.wait_for(lambda: "operator" in json.dumps(view.view) or None)
    assert shown and "submit" not in view.view  # nothing to submit: only the refusal
    assert provider_writes(stack) == []


async def test_a_failed_views_open_is_explained(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    stack.slack.fail("views.open", "internal_error")
    answer = await whisper(stack, "U04DAVE", "C0INCIDENT", "update together-prod tc-h100-reserved")
    assert "could not open the form" in answer.text and "internal_error" in answer.text
    assert "num_gpus=16" in answer.text  # what to do instead
    assert stack.slack.views == {} and provider_writes(stack) == []


async def test_a_prefilled_value_is_not_sent_after_the_cluster_changed_meanwhile(
    sqlite_stack: LocalStack,
) -> None:
    """The form showed num_gpus 16; while it was open someone else scaled the cluster to 8.
    Leaving the prefilled 16 as it was is not a request to scale back up."""
    stack = sqlite_stack
    await stack.sender.command("U04DAVE", "C0INCIDENT", "update together-prod tc-h100-sched")
    view = await opened_modal(stack, "U04DAVE", "gpu_update")
    assert input_block(view, "num_gpus")["element"]["initial_value"] == "16"
    stack.together.clusters["tc-h100-sched"]["num_gpus"] = 8  # changed elsewhere meanwhile

    submitted = await stack.sender.view_submission(
        "U04DAVE", view.id, {"num_preemptible_gpus": "8"}
    )
    assert submitted.status == 200 and submitted.json is None, submitted.json
    await stack.slack.wait_for(lambda: stack.slack.ephemerals_for("U04DAVE"))
    await stack.runtime.workflow.drain()
    [put] = stack.together.calls("update", "PUT")
    assert put.body == {"num_preemptible_gpus": 8}
    assert stack.together.clusters["tc-h100-sched"]["num_gpus"] == 8


async def test_a_reason_on_the_command_line_is_carried_into_the_form(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    await stack.sender.command(
        "U04DAVE", "C0INCIDENT", 'action e2e-delhi 101 scale_cluster reason="eval capacity"'
    )
    view = await opened_modal(stack, "U04DAVE", "gpu_action")
    assert input_block(view, "reason")["element"]["initial_value"] == "eval capacity"
    done = await stack.sender.view_submission("U04DAVE", view.id, {"additional_nodes": "1"})
    assert done.ok and done.json is None
    confirmation = await stack.slack.wait_for(
        lambda: next(iter(stack.slack.ephemerals_for("U04DAVE")), None)
    )
    assert "waiting for approval" in confirmation.text
    [request] = await stack.runtime.store.list_requests()
    assert request.reason == "eval capacity"


async def test_a_refused_submission_shows_its_reason_under_the_forms_first_input(
    sqlite_stack: LocalStack,
) -> None:
    """The cluster cannot be read again at submission (the provider fails): the reason is
    shown in the form, under an input it has (Slack refuses errors for any other block)."""
    stack = sqlite_stack
    await stack.sender.command("U04DAVE", "C0INCIDENT", "update together-prod tc-h100-reserved")
    view = await opened_modal(stack, "U04DAVE", "gpu_update")
    stack.together.faults.add(Fault(route="get", kind=FaultKind.SERVER_ERROR, times=-1))
    refused = await stack.sender.view_submission("U04DAVE", view.id, {"num_gpus": "24"})
    assert refused.status == 200 and refused.problems == ()
    assert refused.json["response_action"] == "errors"
    assert list(refused.json["errors"]) == ["cluster_type"]  # the form's first input
    assert provider_writes(stack) == []
