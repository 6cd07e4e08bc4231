"""Bolt's "`token` will be unused" warning is dropped at its logger, and only that line."""

from __future__ import annotations

import logging

import pytest
from slack_bolt.logger.messages import (
    warning_client_prioritized_and_token_skipped,
    warning_token_skipped,
)

from bot.slack.app import BOLT_APP_LOGGER, DropTokenUnusedWarning, quiet_token_unused_warning


def test_only_the_token_unused_line_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    quiet_token_unused_warning()
    quiet_token_unused_warning()  # once, however often
    bolt = logging.getLogger(BOLT_APP_LOGGER)
    assert sum(isinstance(f, DropTokenUnusedWarning) for f in bolt.filters) == 1
    with caplog.at_level(logging.WARNING, logger=BOLT_APP_LOGGER):
        bolt.warning(warning_client_prioritized_and_token_skipped())
        bolt.warning(warning_token_skipped())
    assert [r.getMessage() for r in caplog.records] == [warning_token_skipped()]
