"""What a submitted form is answered with: error keys only for blocks of that form, the form
shown again with what was typed, and the views that stand in for it while or after checking."""

from __future__ import annotations

from typing import Any

from slack_sdk.models.views import View

from bot.slack.render import forms, primitives
from handlers.modals import errors_for_view

FORM: dict[str, Any] = {
    "type": "modal",
    "callback_id": "gpu_action",
    "title": {"type": "plain_text", "text": "Cluster action"},
    "submit": {"type": "plain_text", "text": "Request change"},
    "close": {"type": "plain_text", "text": "Cancel"},
    "private_metadata": '{"project": "e2e-delhi"}',
    "blocks": [
        {"type": "section", "text": {"type": "mrkdwn", "text": "*train* (`101`)"}},
        {
            "type": "input",
            "block_id": "action",
            "label": {"type": "plain_text", "text": "Action"},
            "element": {
                "type": "static_select",
                "action_id": "action",
                "options": [
                    {"text": {"type": "plain_text", "text": v}, "value": v}
                    for v in ("scale_cluster", "attach_ip")
                ],
            },
        },
        {
            "type": "input",
            "block_id": "additional_nodes",
            "label": {"type": "plain_text", "text": "Nodes"},
            "element": {"type": "plain_text_input", "action_id": "additional_nodes"},
        },
    ],
    "state": {
        "values": {
            "action": {
                "action": {
                    "type": "static_select",
                    "selected_option": {
                        "text": {"type": "plain_text", "text": "scale_cluster"},
                        "value": "scale_cluster",
                    },
                }
            },
            "additional_nodes": {"additional_nodes": {"type": "plain_text_input", "value": "-3"}},
        }
    },
}


def test_errors_for_blocks_the_form_lacks_go_under_its_first_input() -> None:
    errors = errors_for_view({"num_gpus": "lost", "additional_nodes": "too few"}, FORM)
    assert errors == {"action": "lost", "additional_nodes": "too few"}
    assert errors_for_view({"": "unreadable", "action": "choose"}, FORM) == {
        "action": "unreadable choose"
    }


def test_the_form_again_keeps_what_was_typed_and_says_what_is_wrong() -> None:
    again = forms.form_with_problems(FORM, {"additional_nodes": "must be at least 1"})
    View(**again).validate_json()
    assert again["submit"] == FORM["submit"] and again["callback_id"] == "gpu_action"
    assert "must be at least 1" in again["blocks"][0]["text"]["text"]
    by_id = {b.get("block_id"): b for b in again["blocks"]}
    assert by_id["additional_nodes"]["element"]["initial_value"] == "-3"
    assert by_id["action"]["element"]["initial_option"]["value"] == "scale_cluster"
    assert "state" not in again


def test_checking_and_answer_views_are_valid_modals_without_submit() -> None:
    checking = forms.checking_modal("gpu_update", "gpuops", {})
    answer = forms.reply_modal("gpu_update", primitives.notice("CR-ABC123 is waiting"), {})
    for view in (checking, answer):
        View(**view).validate_json()
        assert "submit" not in view
    assert "CR-ABC123" in answer["blocks"][0]["text"]["text"]
