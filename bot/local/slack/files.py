"""The stand-in's file uploads, as Slack's external upload flow works:

1. ``files.getUploadURLExternal`` (``filename``, ``length`` in bytes; ``alt_txt``,
   ``snippet_type``) answers ``upload_url`` and ``file_id``. ``length`` 0 is
   ``missing_argument``, a missing or non-numeric one ``invalid_arguments``, more than the
   workspace's file size limit (Slack's: 1 GB) ``file_upload_size_restricted``, a snippet over
   1 MB ``snippet_too_large``, an ``alt_txt`` over 1,000 characters ``alt_txt_too_large``.
2. The bytes are POSTed to ``upload_url``, which the stand-in serves itself (real Slack: on
   files.slack.com), raw or as multipart form data. The URL is the permission (no token), is
   good for one upload, and takes at most the ``length`` that was announced; the answer is
   HTTP 200 ``OK - <bytes>``.
3. ``files.completeUploadExternal`` (``files``: a JSON array of ``{"id", "title"}``;
   ``channel_id``, ``channels``, ``thread_ts``, ``initial_comment``) shares the files: a file
   never uploaded, unknown, or already completed is ``file_not_found``; the ``channel_id``
   errors are those of posting there (``channel_not_found``, ``not_in_channel``); an unknown
   id in ``channels`` (channel or user ids, comma-separated, at most 100, else
   ``channels_limit_exceeded``) is ``invalid_channel``. Without either the file stays
   private. What Slack documents without an error (``thread_ts`` with no channel or more
   than one, an upload shorter than its ``length``) is posted and noted in
   ``FakeSlack.spec_problems``.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import Any

from aiohttp import BodyPartReader, web
from pydantic import BaseModel

from bot.local.slack.models import JsonDict, random_id

SLACK_MAX_FILE_BYTES = 1024**3  # Slack: files up to 1 GB
SNIPPET_MAX_BYTES = 1024**2
ALT_TEXT_MAX = 1000


class UploadRefused(Exception):
    """A files method's error, as Slack names it (FakeSlack answers it as ``ok: false``)."""

    def __init__(self, error: str, *messages: str) -> None:
        super().__init__(error)
        self.error = error
        self.messages = list(messages)


class UploadedFile(BaseModel):
    """A file from its upload ticket on: its bytes once uploaded, where it was shared."""

    id: str
    filename: str
    length: int
    title: str | None = None
    content: bytes | None = None
    completed: bool = False
    channel: str | None = None
    """Where it was first shared (``channel_id``, else the first of ``channels``)."""
    thread_ts: str | None = None
    created: float

    @property
    def text(self) -> str:
        return (self.content or b"").decode("utf-8", errors="replace")

    def as_slack(self) -> JsonDict:
        """The file object in a message, as Slack shows it (the fields readers use)."""
        return {
            "id": self.id,
            "name": self.filename,
            "title": self.title or self.filename,
            "mimetype": "text/markdown" if self.filename.endswith(".md") else "text/plain",
            "filetype": "markdown" if self.filename.endswith(".md") else "text",
            "size": len(self.content or b""),
            "created": int(self.created),
        }


def _length(raw: Any) -> int:
    if raw in (None, ""):
        raise UploadRefused("invalid_arguments", "[ERROR] missing required field: length")
    try:
        length = int(str(raw))
    except ValueError:
        raise UploadRefused(
            "invalid_arguments", "[ERROR] invalid type for field: length (an integer)"
        ) from None
    if length == 0:
        raise UploadRefused("missing_argument")
    if length < 0:
        raise UploadRefused("invalid_arguments", "[ERROR] length must be positive")
    return length


class SlackFiles:
    """Upload tickets and files of one stand-in workspace."""

    def __init__(self, base_url: Callable[[], str], max_file_bytes: int = SLACK_MAX_FILE_BYTES):
        self._base_url = base_url
        self.upload_base_url: str | None = None
        """Where upload URLs point, when not at the stand-in itself (real Slack's are on
        another host than its Web API): a test puts a fault proxy there."""
        self.max_file_bytes = max_file_bytes
        self.files: dict[str, UploadedFile] = {}
        self._tickets: dict[str, str] = {}  # upload URL token → file id, until used

    def reset(self) -> None:
        self.files.clear()
        self._tickets.clear()

    # -- 1. files.getUploadURLExternal --------------------------------------------------

    def ticket(self, args: JsonDict) -> JsonDict:
        filename = str(args.get("filename") or "").strip()
        if not filename:
            raise UploadRefused("invalid_arguments", "[ERROR] missing required field: filename")
        length = _length(args.get("length"))
        if len(str(args.get("alt_txt") or "")) > ALT_TEXT_MAX:
            raise UploadRefused("alt_txt_too_large")
        if args.get("snippet_type") and length > SNIPPET_MAX_BYTES:
            raise UploadRefused("snippet_too_large")
        if length > self.max_file_bytes:
            raise UploadRefused("file_upload_size_restricted")
        file = UploadedFile(
            id=random_id("F"), filename=filename, length=length, created=time.time()
        )
        token = secrets.token_urlsafe(24)
        self.files[file.id] = file
        self._tickets[token] = file.id
        base = self.upload_base_url or self._base_url()
        return {"upload_url": f"{base}/upload/v1/{token}", "file_id": file.id}

    # -- 2. the upload -------------------------------------------------------------------

    async def receive(self, request: web.Request) -> web.Response:
        file_id = self._tickets.pop(request.match_info["token"], None)
        if file_id is None:  # never issued, or used already
            return web.Response(status=404, text="upload URL not found or already used")
        file = self.files[file_id]
        try:
            content = await _body(request, limit=file.length)
        except _TooLarge:
            return web.Response(
                status=413, text=f"more than the {file.length} bytes announced for this file"
            )
        file.content = content
        return web.Response(text=f"OK - {len(content)}")

    # -- 3. files.completeUploadExternal --------------------------------------------------

    def complete(self, args: JsonDict) -> list[UploadedFile]:
        """The files to share, checked (nothing is marked until all of them pass)."""
        wanted = _file_list(args.get("files"))
        ready: list[tuple[UploadedFile, str | None]] = []
        for item in wanted:
            file = self.files.get(str(item.get("id", "")))
            if file is None or file.content is None or file.completed:
                raise UploadRefused("file_not_found")
            title = item.get("title")
            ready.append((file, None if title in (None, "") else str(title)))
        for file, title in ready:
            file.completed, file.title = True, title
        return [file for file, _ in ready]


def _file_list(raw: Any) -> list[JsonDict]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise UploadRefused("invalid_arguments", "[ERROR] files: not JSON") from None
    if not isinstance(raw, list) or not raw or not all(isinstance(f, dict) for f in raw):
        raise UploadRefused(
            "invalid_arguments", "[ERROR] files: an array of {id, title} objects is required"
        )
    return raw


class _TooLarge(Exception):
    """An upload longer than the length its URL was issued for (Slack refuses it whole)."""


async def _body(request: web.Request, *, limit: int) -> bytes:
    """The uploaded bytes: a raw body, or the file part of a multipart form."""
    if request.content_type.startswith("multipart/"):
        reader = await request.multipart()
        async for part in reader:
            if isinstance(part, BodyPartReader) and part.filename is not None:
                return await _read_limited(part.read_chunk, limit)
        return b""
    return await _read_limited(request.content.read, limit)


async def _read_limited(read: Callable[[int], Any], limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await read(64 * 1024)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
