"""The timeline file's upload POST over real HTTP, through a fault proxy in front of the Slack
stand-in's upload URL: a connection refused before any byte was sent is tried again (from
the file's start) and the file is shared whole; a connection broken once it was made is not
tried again, and the person is told the file was not shared."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from bot.local.demo.stack import LocalStack
from bot.local.faults.proxy import FaultProxy
from tests.integration.timeline.test_timeline import shared_files, timeline_of
from tests.support.slack_support import command_reply
from tests.support.workflow_kit import BOB, CHANNEL, DAVE, poll_until, request


class _ListenOnRefusal(logging.Handler):
    """Makes the proxy listen the moment the bot logs that it will try the upload again."""

    def __init__(self, proxy: FaultProxy) -> None:
        super().__init__()
        self.proxy = proxy
        self.refusals: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("uploading a file: could not connect"):
            self.refusals.append(message)
            self.proxy.listen_now()


@pytest.fixture
async def upload_proxy(sqlite_stack: LocalStack) -> AsyncIterator[FaultProxy]:
    """A proxy the stand-in's upload URLs point at, forwarding to the stand-in."""
    assert sqlite_stack.slack.port is not None
    proxy = FaultProxy(target_port=sqlite_stack.slack.port)
    await proxy.start()
    sqlite_stack.slack.uploads.upload_base_url = f"http://127.0.0.1:{proxy.port}"
    yield proxy
    await proxy.close()


async def test_a_refused_upload_connection_is_tried_again_and_the_file_is_shared(
    sqlite_stack: LocalStack, upload_proxy: FaultProxy
) -> None:
    stack = sqlite_stack
    await request(stack, DAVE, "action e2e-delhi 101 restart_workers")
    upload_proxy.refuse()  # the first connection: ECONNREFUSED, nothing sent
    handler = _ListenOnRefusal(upload_proxy)
    messenger_log = logging.getLogger("bot.slack.upload_bytes")
    messenger_log.addHandler(handler)
    try:
        _, file, _ = await timeline_of(stack, BOB, CHANNEL)
    finally:
        messenger_log.removeHandler(handler)
    assert handler.refusals == [
        "uploading a file: could not connect (ClientConnectorError), attempt 1 of 3; trying again"
    ]
    assert upload_proxy.accepted == 1
    assert file.content is not None and len(file.content) == file.length
    assert file.content.startswith(b"# ")  # the file from its start, not from where it stopped


async def test_an_upload_broken_off_after_connecting_is_not_tried_again(
    sqlite_stack: LocalStack, upload_proxy: FaultProxy
) -> None:
    stack = sqlite_stack
    await request(stack, DAVE, "action e2e-delhi 101 restart_workers")
    upload_proxy.hang()  # accepts and holds the bytes: they may have reached Slack
    await command_reply(stack, BOB, CHANNEL, "timeline")
    await poll_until(lambda: upload_proxy.accepted == 1 and upload_proxy.open_connections)
    upload_proxy.drop()
    told = await stack.slack.wait_for(
        lambda: next(iter(stack.slack.ephemerals_for(BOB, CHANNEL)[1:]), None)
    )
    assert "The upload to Slack broke off, so the file was not shared" in told.text
    assert upload_proxy.accepted == 1  # never posted again
    assert shared_files(stack, CHANNEL) == []
    assert stack.slack.calls_to("files.completeUploadExternal") == []
