"""Words people read: counts agree with their nouns, states read as sentences, example
times lie in the future."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from bot.core.answers import HelpCard
from bot.core.policy import Role
from bot.local.demo.console import script_verdict
from bot.providers.base import ChangeInputError, example_time
from bot.providers.together.adapter import TogetherAdapter
from bot.providers.together.rules import parse_update
from bot.slack.render.answers import help_message
from bot.slack.render.watch import progress_words
from tests.support.catalog import CHANGES
from tests.support.together_kit import client_for


@pytest.mark.parametrize(
    ("steps", "failures", "line"),
    [
        (1, 0, "script: 1 step, all passed"),
        (2, 0, "script: 2 steps, all passed"),
        (3, 1, "script: 3 steps, 1 failed"),
    ],
)
def test_the_script_verdict_counts_in_words(steps: int, failures: int, line: str) -> None:
    assert script_verdict(steps, failures) == line


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ("SUCCEEDED", "succeeded"),
        ("RUNNING", "is running"),
        ("FAILED", "failed"),
        ("AUTO_RESOLVED", "resolved itself"),
        ("SOMETHING_NEW", "is now SOMETHING_NEW"),
    ],
)
def test_a_remediation_state_reads_as_a_sentence(state: str, words: str) -> None:
    assert progress_words(state) == words


# -- example times are computed from now, never in the past ---------------------------------

LATE_2031 = datetime(2031, 11, 20, 15, 30, tzinfo=UTC)


def _examples(text: str) -> list[datetime]:
    found = re.findall(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", text)
    assert found, text
    return [datetime.fromisoformat(t) for t in found]


def test_example_time_is_a_month_ahead_at_midnight() -> None:
    assert example_time(LATE_2031) == "2031-12-20T00:00:00Z"
    assert all(when > datetime.now(UTC) for when in _examples(example_time()))


def test_the_end_time_hint_is_in_the_future_of_the_adapters_clock() -> None:
    adapter = TogetherAdapter(client_for("http://127.0.0.1:9/v1"), "p", now=lambda: LATE_2031)
    [hint] = [s.hint for s in adapter.fields_for("update") if s.name == "reservation_end_time"]
    assert all(when > LATE_2031 for when in _examples(hint))


def test_an_unreadable_time_is_answered_with_a_future_example() -> None:
    with pytest.raises(ChangeInputError) as caught:
        parse_update({"reservation_end_time": "tomorrow"})
    message = caught.value.errors["reservation_end_time"]
    assert all(when > datetime.now(UTC) for when in _examples(message))


def test_the_help_example_time_is_in_the_future() -> None:
    text = help_message(HelpCard({"together-prod": Role.operator}, CHANGES)).text
    assert all(when > datetime.now(UTC) for when in _examples(text))
