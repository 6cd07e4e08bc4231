"""Every transition of a change request writes one INFO line (SPEC §12): with JSON logs it
carries the request's id, who moved it, its channel, project and cluster."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from bot.logs import configure_logging
from tests.support.core_harness import BOB, CHANNEL, DAVE, Core

SCALE = {"additional_nodes": "2"}


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """The root handler as `gpuops serve` installs it with GPUOPS_LOG_FORMAT=json."""
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    stream = io.StringIO()
    configure_logging("INFO", "json", stream)
    try:
        yield stream
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[1]:
            root.addHandler(handler)
        root.setLevel(saved[0])


def lines_of(stream: io.StringIO, request_id: str) -> list[dict[str, str]]:
    entries = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [e for e in entries if e.get("request_id") == request_id]


async def test_a_request_its_approval_and_its_result_are_logged_with_its_id(
    core: Core, json_lines: io.StringIO
) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    assert await core.approve(BOB, opened.id) is None
    lines = lines_of(json_lines, opened.id)
    said = [line["message"] for line in lines]
    assert said == [
        f"request {opened.id}: open (new -> pending) by {DAVE}",
        f"request {opened.id}: approve (pending -> approved) by {BOB}",
        f"request {opened.id}: start (approved -> executing) by {BOB}",
        f"request {opened.id}: finish-succeeded (executing -> succeeded) by {DAVE}",
    ]
    for line in lines:
        assert line["level"] == "INFO"
        assert (line["channel"], line["project"], line["cluster"]) == (CHANNEL, "e2e-delhi", "101")
    assert [line["user"] for line in lines] == [DAVE, BOB, BOB, DAVE]


async def test_a_denial_is_logged_with_its_id(core: Core, json_lines: io.StringIO) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    await core.deny(BOB, opened.id)
    said = [line["message"] for line in lines_of(json_lines, opened.id)]
    assert said[-1] == f"request {opened.id}: deny (pending -> denied) by {BOB}"
