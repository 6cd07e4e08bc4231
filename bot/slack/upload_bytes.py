"""The bytes of a file upload (``files.getUploadURLExternal``'s URL): read in chunks off
the event loop, and which connection errors mean nothing was sent (so the upload may be
tried again from the start)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import BinaryIO

import aiohttp

UPLOAD_CHUNK = 64 * 1024


async def chunks(content: BinaryIO, length: int) -> AsyncIterator[bytes]:
    """``length`` bytes of ``content`` from where it is, read off the event loop."""
    left = length
    while left > 0:
        chunk = await asyncio.to_thread(content.read, min(UPLOAD_CHUNK, left))
        if not chunk:
            return
        left -= len(chunk)
        yield chunk


# Errors raised before the request's first byte was written: the connection was never made.
NOT_CONNECTED = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
# A certificate or TLS refusal is not a connection that failed to happen: trying again will
# not change it.
NOT_TRANSIENT = (aiohttp.ClientConnectorCertificateError, aiohttp.ClientConnectorSSLError)


def nothing_sent(exc: Exception) -> bool:
    """True for a connection that could not be made and may be made on another try."""
    return isinstance(exc, NOT_CONNECTED) and not isinstance(exc, NOT_TRANSIENT)
