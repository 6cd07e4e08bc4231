"""The Block Kit rules the local Slack stand-in applies: input state and Slack's limits."""

from __future__ import annotations

from typing import Any

import pytest

from bot.local.slack.models import (
    BlockInputError,
    bare_user_ids,
    block_problems,
    entry_from_input,
    fallback_problems,
    initial_entry,
    missing_required,
    sdk_block_problems,
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


def _approve_buttons(block_id: str, *action_ids: str) -> dict[str, Any]:
    return {
        "type": "actions",
        "block_id": block_id,
        "elements": [
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Approve"},
                "action_id": action_id,
                "value": block_id,
            }
            for action_id in action_ids
        ],
    }


def test_an_action_id_is_unique_within_its_block_not_across_blocks() -> None:
    """SPEC §4.6, as Slack: two requests' approve_request buttons sit in two blocks."""
    two_blocks = [
        _approve_buttons("CR-1", "approve_request"),
        _approve_buttons("CR-2", "approve_request"),
    ]
    assert block_problems(two_blocks) == []
    assert view_problems({"type": "home", "blocks": two_blocks}, kind="home") == []
    one_block = [_approve_buttons("CR-1", "approve_request", "approve_request")]
    assert block_problems(one_block) == [
        "duplicate action_id 'approve_request' [json-pointer:/blocks/0]"
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


def text_input(**element: Any) -> list[dict[str, Any]]:
    return [
        {
            "type": "input",
            "block_id": "reason",
            "label": {"type": "plain_text", "text": "Reason"},
            "element": {"type": "plain_text_input", "action_id": "reason", **element},
        }
    ]


def only_problem(blocks: list[dict[str, Any]]) -> str:
    [problem] = block_problems(blocks, in_view=True)
    return problem


def test_a_text_input_has_lengths_slack_accepts() -> None:
    assert block_problems(text_input(min_length=0, max_length=3000), in_view=True) == []
    assert "max_length must be between 1 and 3000" in only_problem(text_input(max_length=3001))
    assert "max_length must be between 1 and 3000" in only_problem(text_input(max_length=0))
    assert "min_length must be between 0 and 3000" in only_problem(text_input(min_length=3001))
    assert "min_length must not be more than max_length" in only_problem(
        text_input(min_length=10, max_length=5)
    )
    assert "initial_value must not be longer" in only_problem(
        text_input(max_length=3, initial_value="four")
    )


def test_placeholders_and_hints_have_slacks_lengths() -> None:
    placeholder = {"type": "plain_text", "text": "p" * 151}
    assert "placeholder must be less than 151" in only_problem(text_input(placeholder=placeholder))
    [block] = text_input()
    hinted = [{**block, "hint": {"type": "plain_text", "text": "h" * 2001}}]
    assert "hint must be less than 2001" in only_problem(hinted)
    assert (
        block_problems([{**block, "hint": {"type": "plain_text", "text": "h"}}], in_view=True) == []
    )


def test_an_initial_option_must_be_one_of_the_options() -> None:
    kubernetes, slurm = SELECT["options"]
    nomad = {"text": {"type": "plain_text", "text": "Nomad"}, "value": "NOMAD"}
    renamed = {"text": {"type": "plain_text", "text": "Slurm!"}, "value": "SLURM"}
    for good in (kubernetes, slurm):
        assert block_problems(text_input_with(SELECT, initial_option=good), in_view=True) == []
    for bad in (nomad, renamed):
        assert "must be one of the options" in only_problem(
            text_input_with(SELECT, initial_option=bad)
        )
    boxes = {**SELECT, "type": "checkboxes"}
    assert "'NOMAD' must be one of" in only_problem(
        text_input_with(boxes, initial_options=[slurm, nomad])
    )


def text_input_with(element: dict[str, Any], **extra: Any) -> list[dict[str, Any]]:
    [block] = text_input()
    return [{**block, "element": {**element, **extra}}]


def test_slack_sdk_models_are_the_second_opinion() -> None:
    image = {"type": "image", "image_url": "https://example.com/a.png"}
    assert block_problems([image]) == [
        "slack_sdk: ImageBlock.__init__() missing 1 required keyword-only argument: 'alt_text'"
        " [json-pointer:/blocks/0]"
    ]
    assert block_problems([{**image, "alt_text": "a" * 2001}]) == [
        "slack_sdk: alt_text attribute cannot exceed 2000 characters [json-pointer:/blocks/0]"
    ]
    long_text = {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}
    assert block_problems([long_text]) == [
        "text must be less than 3001 characters [json-pointer:/blocks/0]"
    ]
    assert sdk_block_problems({"type": "section", "text": {"type": "mrkdwn", "text": "x"}}) == []
    assert sdk_block_problems({"type": "bogus"}) == ["slack_sdk does not know this block"]


def test_a_message_with_blocks_needs_a_text_fallback() -> None:
    blocks = [{"type": "divider"}]
    assert fallback_problems("", blocks) == [
        "a message with blocks needs a text fallback [json-pointer:/text]"
    ]
    assert fallback_problems("   ", blocks)
    assert fallback_problems(None, blocks)
    assert fallback_problems("summary", blocks) == []
    assert fallback_problems("plain", None) == []


def test_home_views_take_100_blocks_and_no_title() -> None:
    section = {"type": "section", "text": {"type": "mrkdwn", "text": "a cluster"}}
    home = {"type": "home", "blocks": [section] * 100}
    assert view_problems(home, kind="home") == []
    assert (
        "no more than 100 items"
        in view_problems({**home, "blocks": [section] * 101}, kind="home")[0]
    )
    assert "must be home" in view_problems({**home, "type": "modal"}, kind="home")[0]
    assert "must be modal" in view_problems(home)[0]
    too_much = {**home, "private_metadata": "m" * 3001}
    assert view_problems(too_much, kind="home") == [
        "private_metadata must be at most 3000 characters"
    ]


def test_modal_limits_from_the_spec() -> None:
    section = {"type": "section", "text": {"type": "mrkdwn", "text": "x"}}
    modal = {
        "type": "modal",
        "title": {"type": "plain_text", "text": "t" * 24},
        "blocks": [section],
    }
    assert view_problems(modal) == []
    assert (
        "title must be less than 25"
        in view_problems({**modal, "title": {"type": "plain_text", "text": "t" * 25}})[0]
    )
    assert "no more than 100 items" in view_problems({**modal, "blocks": [section] * 101})[0]
    assert view_problems({**modal, "private_metadata": "m" * 3001}) == [
        "private_metadata must be at most 3000 characters"
    ]
    button = {
        "type": "actions",
        "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": "Go"}, "value": "v" * 2001}
        ],
    }
    assert "button value must be at most 2000" in block_problems([button])[0]


def test_bare_user_ids_are_those_not_written_as_mentions() -> None:
    text = "U01ALICE asked; <@U01ALICE> and <@U02BOB|bob> approved, xU02BOB; U02BOB. U99NOBODY"
    assert bare_user_ids(text, ["U01ALICE", "U02BOB"]) == ["U01ALICE", "U02BOB"]
    assert bare_user_ids("<@U01ALICE> asked", ["U01ALICE"]) == []
    assert bare_user_ids("W0ENTERPRISE approved", ["W0ENTERPRISE"]) == ["W0ENTERPRISE"]


def _button(**extra: Any) -> dict[str, Any]:
    text = {"type": "plain_text", "text": "Open"}
    return {"type": "button", "text": text, "action_id": "open", **extra}


def _confirm(title: str) -> dict[str, Any]:
    def plain(text: str) -> dict[str, str]:
        return {"type": "plain_text", "text": text}

    return {
        "title": plain(title),
        "text": plain("Sure?"),
        "confirm": plain("Yes"),
        "deny": plain("No"),
    }


@pytest.mark.parametrize(
    ("element", "problem"),
    [
        (_button(url="https://example.com/" + "a" * 2982), "url attribute cannot exceed 3000"),
        (_button(style="green"), "style attribute must be one of the following values"),
        (_button(confirm=_confirm("t" * 101)), "title attribute cannot exceed 100 characters"),
    ],
)
def test_nested_elements_are_checked_as_slack_does(element: dict[str, Any], problem: str) -> None:
    actions = {"type": "actions", "elements": [element]}
    (found,) = block_problems([actions])
    assert problem in found
    modal = {
        "type": "modal",
        "title": {"type": "plain_text", "text": "Deploy"},
        "blocks": [actions],
    }
    assert any(problem in p for p in view_problems(modal))


def test_nested_elements_within_slacks_limits_pass() -> None:
    button = _button(
        url="https://example.com/" + "a" * 2980, style="danger", confirm=_confirm("t" * 100)
    )
    assert block_problems([{"type": "actions", "elements": [button]}]) == []
