"""The pure parts of the Workflow Builder step: its ``change`` read as the command grammar
reads it, what a step lacks where a command would open a form, inputs that are empty or
not text, and its refusal text."""

from __future__ import annotations

from typing import Any

import pytest

from bot.core.ask.forms import FormRequest
from bot.core.ask.grammar import ChangeCommand, UsageError, parse_change
from bot.core.builder_steps.start import StepStart, form_needs
from bot.redact import redact
from bot.slack.builder_steps import error_text, plain_text
from tests.support.catalog import CATALOG


def UpdateCommand(**given: Any) -> ChangeCommand:
    """``/gpu update …``: Together's verb is its one action."""
    return ChangeCommand(name="update", action="update", **given)


def ActionCommand(**given: Any) -> ChangeCommand:
    """``/gpu action …``: E2E's verb takes an action word."""
    return ChangeCommand(name="action", **given)


def test_a_together_change_is_read_as_update_fields() -> None:
    command = parse_change(
        "update", "together-prod", "c-1", "num_gpus=16 cluster_type=KUBERNETES", "", CATALOG
    )
    assert command == UpdateCommand(
        project="together-prod",
        cluster_id="c-1",
        fields={"num_gpus": "16", "cluster_type": "KUBERNETES"},
    )


def test_an_e2e_change_is_an_action_and_its_fields() -> None:
    command = parse_change(
        "action", "e2e-delhi", "101", "scale_cluster additional_nodes=2", "", CATALOG
    )
    assert command == ActionCommand(
        project="e2e-delhi",
        cluster_id="101",
        action="scale_cluster",
        fields={"additional_nodes": "2"},
    )


def test_the_reason_input_is_the_reason_and_is_held_to_its_limit() -> None:
    given = parse_change("update", "p", "c", 'num_gpus=16 reason="in change"', "  ", CATALOG)
    assert given.reason == "in change"
    taken = parse_change(
        "update", "p", "c", 'num_gpus=16 reason="in change"', "capacity form", CATALOG
    )
    assert taken.reason == "capacity form"
    with pytest.raises(UsageError, match="at most 500 characters"):
        parse_change("update", "p", "c", "num_gpus=16", "x" * 501, CATALOG)


def test_project_and_cluster_are_checked_as_on_the_command_line() -> None:
    with pytest.raises(UsageError, match="is not a valid cluster id"):
        parse_change("update", "together-prod", "c 1", "num_gpus=16", "", CATALOG)


def test_what_a_step_lacks_where_a_command_opens_a_form() -> None:
    update = FormRequest(kind="single", project="p", cluster_id="c", channel="C1")
    assert "names no field" in form_needs(update, [])
    no_action = FormRequest(kind="choice", project="p", cluster_id="c", channel="C1")
    assert "names no action" in form_needs(no_action, [])
    scale = FormRequest(
        kind="choice", project="p", cluster_id="c", channel="C1", action="scale_cluster"
    )
    assert form_needs(scale, ["additional_nodes"]).startswith(
        "`scale_cluster` needs `additional_nodes`: give them in the step's `change`"
    )


def test_empty_inputs_are_named() -> None:
    start = StepStart("Fx1", "p", " ", "num_gpus=16", "", "U1", "")
    assert start.missing() == ["cluster_id", "channel"]
    assert start.problem() == "The step's input `cluster_id` is empty; give it a value."


def test_an_input_that_is_not_text_is_named_before_an_empty_one() -> None:
    start = StepStart("Fx1", "p", "", "", "", "U1", "C1", not_text=("cluster_id",))
    assert start.problem() == "The step's input `cluster_id` is not text; give it as a string."


def test_the_refusal_text_is_plain_text_as_written() -> None:
    # Slack shows a step's error as plain text: an escape would be shown as "&lt;".
    assert error_text({"error": "usage: update <project> & more"}) == (
        "usage: update <project> & more"
    )
    assert error_text({}) == "gpuops could not make this request."


def test_plain_text_shows_channel_links_and_mentions_as_names() -> None:
    said = "I can't see <#C0NOWHERE>; ask <@U02BOB> (not <!channel> or <https://x|y>)"
    assert (
        plain_text(said) == "I can't see #C0NOWHERE; ask @U02BOB (not <!channel> or <https://x|y>)"
    )


def test_a_step_token_is_masked_even_unregistered() -> None:
    assert redact("completing with xwfp-12345-abcdef0123") == "completing with xwfp-***"
