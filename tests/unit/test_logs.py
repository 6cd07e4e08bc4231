"""JSON log lines (SPEC §12): their fields, the context bound with log_context, redaction;
and what SIGHUP does to a server (bot.signals)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

from bot.logs import JsonFormatter, add_log_context, configure_logging, log_context
from bot.redact import register_secret
from bot.signals import Hangup

SECRET = "logs-test-secret-5e1f0a9b"


@pytest.fixture
def json_stream() -> Iterator[io.StringIO]:
    """The root handler as `gpuops serve` installs it with GPUOPS_LOG_FORMAT=json."""
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    stream = io.StringIO()
    configure_logging("DEBUG", "json", stream)
    try:
        yield stream
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[1]:
            root.addHandler(handler)
        root.setLevel(saved[0])


def entries(stream: io.StringIO) -> list[dict[str, str]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_has_the_fields_and_the_bound_context(json_stream: io.StringIO) -> None:
    log = logging.getLogger("gpuops.test")
    log.info("outside")
    with log_context(user="U04DAVE", channel="C0INCIDENT"):
        with log_context(project="together-prod", cluster="tc-1"):
            add_log_context(request_id="CR-ABCDEF")
            log.warning("inside %s", "both")
        log.info("back to the outer block")
    log.info("outside again")
    outside, inside, outer, again = entries(json_stream)
    assert set(outside) == {"ts", "level", "logger", "message"}
    assert outside["ts"].endswith("Z") and "T" in outside["ts"]
    assert inside == {
        "ts": inside["ts"],
        "level": "WARNING",
        "logger": "gpuops.test",
        "message": "inside both",
        "user": "U04DAVE",
        "channel": "C0INCIDENT",
        "project": "together-prod",
        "cluster": "tc-1",
        "request_id": "CR-ABCDEF",
    }
    assert outer["user"] == "U04DAVE" and "project" not in outer and "request_id" not in outer
    assert set(again) == {"ts", "level", "logger", "message"}


async def test_a_task_started_inside_the_block_keeps_its_context(json_stream: io.StringIO) -> None:
    async def later() -> None:
        await asyncio.sleep(0)
        logging.getLogger("gpuops.test").info("from the task")

    with log_context(request_id="CR-TASK01"):
        task = asyncio.create_task(later())
    await task
    assert entries(json_stream)[-1]["request_id"] == "CR-TASK01"


def test_secrets_are_masked_in_message_exception_and_library_lines(
    json_stream: io.StringIO,
) -> None:
    register_secret(SECRET)
    try:
        raise RuntimeError(f"failed with key {SECRET}")
    except RuntimeError:
        logging.getLogger("gpuops.test").exception("calling with %s", SECRET)
    logging.getLogger("slack_bolt.AsyncApp").error("token xoxb-1-2-abcdef in a library line")
    mine, library = entries(json_stream)
    assert mine["message"] == "calling with ***"
    assert "failed with key ***" in mine["exception"] and "Traceback" in mine["exception"]
    assert library["message"] == "token xoxb-*** in a library line"
    assert SECRET not in json_stream.getvalue()


def test_the_formatter_alone_masks_too() -> None:
    register_secret(SECRET)
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "key %s", (SECRET,), None)
    assert json.loads(JsonFormatter().format(record))["message"] == "key ***"


def test_unknown_context_fields_and_formats_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown log context field"), log_context(tenant="x"):
        pass  # entering the context is what raises; nothing runs inside it
    with pytest.raises(ValueError, match="GPUOPS_LOG_FORMAT must be text or json"):
        configure_logging("INFO", "yaml")  # type: ignore[arg-type]


# -- SIGHUP --------------------------------------------------------------------------------


async def test_hangup_runs_each_callback_and_survives_a_failing_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="bot.signals")
    ran: list[str] = []

    async def reload_policy() -> None:
        ran.append("policy")

    async def broken() -> None:
        raise OSError("policy.yml: permission denied")

    hangup = Hangup()
    hangup.on_hangup("reload the policy", reload_policy)
    hangup.on_hangup("broken", broken)
    hangup.on_hangup("again", reload_policy)
    await hangup.run()
    assert ran == ["policy", "policy"]
    assert "SIGHUP received: reload the policy, broken, again" in caplog.text
    assert "SIGHUP: broken failed: OSError: policy.yml: permission denied" in caplog.text


async def test_hangup_without_callbacks_says_so(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="bot.signals")
    await Hangup().run()
    assert "SIGHUP received: nothing to reload; still serving" in caplog.text
