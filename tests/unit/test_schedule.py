"""Run times of scheduled changes (SPEC §9): at=/in= parsing, the bounds, the words."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.core.ask.grammar import ChangeCommand, UsageError, parse_command
from bot.core.requests.schedule import ScheduleError, parse_at, parse_in, when_text
from tests.support.catalog import CATALOG

NOW = datetime(2026, 12, 1, 17, 0, tzinfo=UTC)


def test_in_and_at_resolve_within_the_bounds() -> None:
    assert parse_in("3h").resolve(NOW) == NOW + timedelta(hours=3)
    assert parse_in("1m").resolve(NOW) == NOW + timedelta(minutes=1)
    assert parse_in("14d").resolve(NOW) == NOW + timedelta(days=14)
    assert parse_at("2026-12-01T20:00:00Z").resolve(NOW) == NOW + timedelta(hours=3)
    assert parse_at("2026-12-01T21:00:00+01:00").resolve(NOW) == NOW + timedelta(hours=3)


@pytest.mark.parametrize("text", ["0m", "15d", "20161m"])
def test_a_delay_out_of_bounds_is_refused_with_the_bounds(text: str) -> None:
    with pytest.raises(ScheduleError, match="from 1 minute to 14 days ahead"):
        parse_in(text).resolve(NOW)


def test_a_past_time_is_refused_with_the_bounds() -> None:
    with pytest.raises(ScheduleError, match="2026-12-01 16:00 UTC has passed"):
        parse_at("2026-12-01T16:00:00Z").resolve(NOW)


@pytest.mark.parametrize("text", ["3 h", "3x", "h", "-1m", "1.5h"])
def test_an_unreadable_delay_says_what_is_right(text: str) -> None:
    with pytest.raises(ScheduleError, match="in=30m"):
        parse_in(text)


def test_a_time_without_a_zone_is_refused() -> None:
    with pytest.raises(ScheduleError, match="time zone"):
        parse_at("2026-12-01T20:00:00")


def test_the_words_say_when_and_how_soon() -> None:
    assert when_text(NOW + timedelta(hours=3), NOW) == "2026-12-01 20:00 UTC, in 3 h"
    assert when_text(NOW + timedelta(seconds=59), NOW) == "2026-12-01 17:00 UTC, in 1 min"
    assert when_text(NOW + timedelta(days=2, hours=4), NOW).endswith("in 2 d 4 h")
    assert when_text(NOW - timedelta(minutes=1), NOW).endswith("now")


def test_the_command_takes_one_run_time() -> None:
    command = parse_command("action e2e-delhi 101 restart_workers in=3h reason=nccl", CATALOG)
    assert isinstance(command, ChangeCommand) and command.schedule is not None
    assert command.schedule.after == timedelta(hours=3) and command.fields == {}
    with pytest.raises(UsageError, match="give one run time"):
        parse_command(
            "update together-prod tc-1 num_gpus=16 in=3h at=2026-12-01T20:00:00Z", CATALOG
        )
    with pytest.raises(UsageError, match="RFC 3339"):
        parse_command("update together-prod tc-1 num_gpus=16 at=tomorrow", CATALOG)
