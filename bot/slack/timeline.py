"""Timelines as files in Slack (SPEC §10): the core writes the Markdown to a temporary file
(bounded memory, whatever the channel's week held) and it is shared by the external upload
flow, in the channel or the thread it was asked in."""

from __future__ import annotations

import logging
import tempfile

from bot.core.api import (
    Reply,
    StoreUnavailable,
    Timeline,
    TimelineRequest,
    error,
    nothing_to_list,
    shared_comment,
    store_unavailable,
)
from bot.slack.messenger import Messenger, SlackDeliveryError
from bot.slack.upload_bytes import FileUpload

log = logging.getLogger(__name__)


class TimelineSender:
    def __init__(self, timeline: Timeline, messenger: Messenger) -> None:
        self.timeline = timeline
        self.messenger = messenger

    async def send(self, request: TimelineRequest, *, thread_ts: str | None = None) -> Reply | None:
        """Build and share the file; None once it is shared, else what to tell the person."""
        with tempfile.TemporaryFile(prefix="gpuops-timeline-") as spool:
            try:
                written = await self.timeline.write(request, spool, self.messenger)
            except StoreUnavailable as exc:
                log.warning("could not build a timeline: %s", exc)
                return store_unavailable()
            if written.listed == 0:
                return nothing_to_list(request)
            length = spool.tell()
            spool.seek(0)
            upload = FileUpload(
                channel=request.channel,
                filename=request.filename,
                title=request.title,
                content=spool,
                length=length,
                initial_comment=shared_comment(request, written),
                thread_ts=thread_ts,
            )
            try:
                await self.messenger.upload_file(upload)
            except SlackDeliveryError as exc:
                return error(f"I could not share the timeline file: {exc.user_message}")
        log.info(
            "shared a timeline of %s: %d events (%d more left out), %d bytes",
            request.channel,
            written.listed,
            written.left_out,
            length,
        )
        return None
