"""The bytes of a file shared in Slack: one POST to the upload URL that files.getUploadURLExternal
gave, read from where the file is, and which of its failures may be tried again (a
connection that was never made sent nothing)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import BinaryIO

import aiohttp

from bot.metrics import SLACK_API_ERRORS
from bot.redact import redact

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 10  # as for the Web API's calls
UPLOAD_TIMEOUT_SECONDS = 120  # the bytes of a file: a week's timeline can be megabytes
UPLOAD_CONNECT_ATTEMPTS = 3  # an upload POST whose connection was never made is tried again


@dataclass(frozen=True)
class FileUpload:
    """A file to share: ``content`` is read from where it is (``length`` bytes from there)."""

    channel: str
    filename: str
    title: str
    content: BinaryIO
    length: int
    initial_comment: str
    thread_ts: str | None = None


async def post_bytes(
    http: aiohttp.ClientSession, url: str, upload: FileUpload, attempt: int, attempts: int
) -> int:
    """One POST of the bytes; its HTTP status."""
    try:
        async with http.post(
            url,
            # Read here, not handed to aiohttp as a file: it closes a file it was given when
            # a request fails, and the next attempt reads it again from the start.
            data=_chunks(upload.content, upload.length),
            headers={
                "Content-Type": "application/octet-stream",
                "Content-Length": str(upload.length),
            },
            timeout=aiohttp.ClientTimeout(
                total=UPLOAD_TIMEOUT_SECONDS, sock_connect=CONNECT_TIMEOUT_SECONDS
            ),
        ) as response:
            await response.read()
            return response.status
    except NOT_CONNECTED as exc:
        SLACK_API_ERRORS.labels("upload_url", "connect").inc()
        again = attempt < attempts and nothing_sent(exc)
        log.warning(
            "uploading a file: could not connect (%s), attempt %d of %d; %s",
            redact(type(exc).__name__),
            attempt,
            attempts,
            "trying again" if again else "giving up",
        )
        raise


_UPLOAD_CHUNK = 64 * 1024


async def _chunks(content: BinaryIO, length: int) -> AsyncIterator[bytes]:
    """``length`` bytes of ``content`` from where it is, read off the event loop."""
    left = length
    while left > 0:
        chunk = await asyncio.to_thread(content.read, min(_UPLOAD_CHUNK, left))
        if not chunk:
            return
        left -= len(chunk)
        yield chunk


# Errors raised before the request's first byte was written: the connection was never made.
NOT_CONNECTED = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
# A certificate or TLS refusal is not a connection that failed to happen: trying again will
# not change it.
_NOT_TRANSIENT = (aiohttp.ClientConnectorCertificateError, aiohttp.ClientConnectorSSLError)


def nothing_sent(exc: Exception) -> bool:
    """True for a connection that could not be made and may be made on another try."""
    return isinstance(exc, NOT_CONNECTED) and not isinstance(exc, _NOT_TRANSIENT)
