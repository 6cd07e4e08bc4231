"""The Block Kit rules the local Slack stand-in applies: input state and Slack's limits."""

from __future__ import annotations

from typing import Any

import pytest

from bot.local.slack.models import (
    BlockInputError,
    block_problems,
    entry_from_input,
    initial_entry,
    missing_required,
    state_values,
    view_problems,
)

SELECT: dict[str, Any] = {
    "type": "static_select",
    "action_id": "cluster_type",
    "options": [
        {"text": {"type": "plain_text", "text": "Kubernetes"}, "value": "KUBERNETES"},
        {"text": {"type": "plain_text", "text": "Slurm"}, "value": "SLURM"},
    ],
}


def test_a_select_takes_an_option_value_or_its_text() -> None:
    by_value = entry_from_input(SELECT, "SLURM")
    by_text = entry_from_input(SELECT, "kubernetes")
    assert by_value["selected_option"]["value"] == "SLURM"
    assert by_text["selected_option"]["value"] == "KUBERNETES"
    assert entry_from_input(SELECT, None) == {"type": "static_select", "selected_option": None}
    with pytest.raises(BlockInputError, match="KUBERNETES, SLURM"):
        entry_from_input(SELECT, "NOMAD")


def test_a_number_input_enforces_its_bounds_and_decimals() -> None:
    element = {"type": "number_input", "action_id": "n", "min_value": "1", "max_value": "64"}
    assert entry_from_input(element, 16) == {"type": "number_input", "value": "16"}
    for bad, message in (("0", "at least 1"), ("65", "at most 64"), ("1.5", "without decimals")):
        with pytest.raises(BlockInputError, match=message):
            entry_from_input(element, bad)


def test_pickers_take_what_a_person_would_type() -> None:
    when = entry_from_input({"type": "datetimepicker"}, "2026-12-31T00:00:00Z")
    assert when == {"type": "datetimepicker", "selected_date_time": 1798675200}
    assert entry_from_input({"type": "datetimepicker"}, "1798675200")["selected_date_time"] == (
        1798675200
    )
    assert entry_from_input({"type": "datepicker"}, "2026-01-02")["selected_date"] == "2026-01-02"
    checked = entry_from_input({**SELECT, "type": "checkboxes"}, "KUBERNETES,SLURM")
    assert [o["value"] for o in checked["selected_options"]] == ["KUBERNETES", "SLURM"]
    with pytest.raises(BlockInputError):
        entry_from_input({"type": "datetimepicker"}, "next tuesday")


def test_untouched_inputs_show_their_initial_values() -> None:
    blocks = [
        {
            "type": "input",
            "block_id": "t",
            "label": {"type": "plain_text", "text": "T"},
            "element": {**SELECT, "initial_option": SELECT["options"][1]},
        },
        {
            "type": "input",
            "block_id": "name",
            "label": {"type": "plain_text", "text": "Name"},
            "element": {"type": "plain_text_input", "action_id": "name"},
        },
    ]
    values = state_values(blocks, {})
    assert values["t"]["cluster_type"]["selected_option"]["value"] == "SLURM"
    assert values["name"]["name"] == {"type": "plain_text_input", "value": None}
    assert missing_required(blocks, values) == {"name": "This field is required."}
    assert initial_entry({"type": "multi_users_select"}) == {
        "type": "multi_users_select",
        "selected_users": [],
    }


def test_block_limits_match_slacks() -> None:
    ok = [{"type": "section", "text": {"type": "mrkdwn", "text": "fine"}}]
    assert block_problems(ok) == []
    assert block_problems(ok * 51)[0].startswith("no more than 50 items")
    duplicate = [{"type": "divider", "block_id": "a"}, {"type": "divider", "block_id": "a"}]
    assert "duplicate block_id" in block_problems(duplicate)[0]
    header = [{"type": "header", "text": {"type": "mrkdwn", "text": "x"}}]
    assert "plain_text" in block_problems(header)[0]
    long_button = [
        {
            "type": "actions",
            "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": "b" * 76}, "value": "v"}
            ],
        }
    ]
    assert "button text" in block_problems(long_button)[0]
    assert block_problems([{"type": "carousel"}]) == [
        "unsupported block type [json-pointer:/blocks/0]"
    ]


def test_modals_need_a_submit_button_for_inputs() -> None:
    view = {
        "type": "modal",
        "title": {"type": "plain_text", "text": "Scale"},
        "blocks": [
            {
                "type": "input",
                "label": {"type": "plain_text", "text": "n"},
                "element": {"type": "number_input"},
            }
        ],
    }
    assert view_problems(view) == [
        "submit is required when an input block is within the blocks array"
    ]
    assert view_problems({**view, "submit": {"type": "plain_text", "text": "Go"}}) == []
