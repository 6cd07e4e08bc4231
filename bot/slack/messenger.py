"""The core's outbound port to Slack: post, edit and whisper messages.

Wraps slack_sdk's AsyncWebClient. Rate-limit answers are retried by slack_sdk's own retry
handler (a 429 was not processed); any other failure becomes a SlackDeliveryError whose
``user_message`` says what the person can do about it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import aiohttp
import stamina
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import GpuopsError
from bot.metrics import SLACK_API_ERRORS
from bot.pacing import waiting_elsewhere
from bot.redact import redact
from bot.slack.render.primitives import SlackMessage, channel_ref
from bot.slack.upload_bytes import (
    NOT_CONNECTED,
    UPLOAD_CONNECT_ATTEMPTS,
    FileUpload,
    nothing_sent,
    post_bytes,
)
from bot.slack.web_client import SLACK_TIMEOUT_SECONDS as SLACK_TIMEOUT_SECONDS
from bot.slack.web_client import build_web_client as build_web_client
from bot.slack.web_client import slack_http_session as slack_http_session

log = logging.getLogger(__name__)

_ADVICE = {
    "not_in_channel": "I'm not a member of {channel}. Invite me with `/invite @gpuops`, "
    "then try again.",
    "channel_not_found": "I can't see {channel} (a private channel or a DM I'm not in?). "
    "Invite me with `/invite @gpuops`, then try again.",
    "is_archived": "{channel} is archived; use another channel.",
    "restricted_action": "This workspace does not let me post in {channel}.",
    "ratelimited": "Slack is rate-limiting me right now; try again in a minute.",
    "msg_too_long": "The message was too long for Slack.",
    "file_uploads_disabled": "This workspace does not allow file uploads, so I cannot share "
    "the file.",
    "file_upload_size_restricted": "The file is larger than this workspace allows.",
    "upload_unreachable": "I could not reach Slack's upload server, so the file was not "
    "shared. Try again in a minute.",
    "upload_interrupted": "The upload to Slack broke off, so the file was not shared. Try again.",
}


class SlackDeliveryError(GpuopsError):
    def __init__(self, method: str, code: str, channel: str | None) -> None:
        self.method = method
        self.code = code
        self.channel = channel
        advice = _ADVICE.get(code, "Slack refused the message ({code}).")
        self.user_message = advice.format(
            channel=channel_ref(channel) if channel else "that channel", code=code
        )
        super().__init__(f"{method} failed: {code}")


_EXPLANATION_MAX = 1000


def _slack_explains(exc: SlackApiError) -> str:
    """Slack's own words for a refusal (``response_metadata.messages``, e.g. "[ERROR]
    duplicate action_id … [json-pointer:/blocks/4]"), for the log; empty when it gave none."""
    metadata = exc.response.get("response_metadata")
    messages = metadata.get("messages") if isinstance(metadata, dict) else None
    if not isinstance(messages, list) or not messages:
        return ""
    text = "; ".join(str(m) for m in messages)
    return " — " + redact(text[:_EXPLANATION_MAX])


@dataclass(frozen=True)
class OpenedView:
    """A modal as Slack answered for it: ``hash`` changes with every update of the view."""

    id: str
    hash: str

    @classmethod
    def of(cls, data: Mapping[str, object]) -> OpenedView:
        found = data.get("view")
        view = found if isinstance(found, dict) else {}
        return cls(str(view.get("id", "")), str(view.get("hash", "")))


class Messenger:
    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client

    async def _call(self, method: str, where: str | None, **kwargs: object) -> dict[str, object]:
        """Call ``method`` with a JSON body of ``kwargs``."""
        return await self._api_call(method, where, json=kwargs)

    async def _form_call(
        self, method: str, where: str | None, params: dict[str, object]
    ) -> dict[str, object]:
        """Call ``method`` with form-style arguments, as slack_sdk sends the file methods."""
        return await self._api_call(method, where, params=params)

    async def _api_call(
        self,
        method: str,
        where: str | None,
        *,
        params: dict[str, object] | None = None,
        json: dict[str, object] | None = None,
    ) -> dict[str, object]:
        try:
            async with waiting_elsewhere():  # a paced command's slot is free meanwhile
                if params is not None:
                    response = await self.client.api_call(method, params=params)
                else:
                    response = await self.client.api_call(method, json=json)
        except SlackApiError as exc:
            code = str(exc.response.get("error") or f"http_{exc.response.status_code}")
            SLACK_API_ERRORS.labels(method, code).inc()
            log.warning("slack %s failed: %s%s", method, code, _slack_explains(exc))
            raise SlackDeliveryError(method, code, where) from None
        except (SlackClientError, OSError, TimeoutError) as exc:
            SLACK_API_ERRORS.labels(method, "transport").inc()
            log.warning("slack %s failed: %s", method, redact(type(exc).__name__))
            raise SlackDeliveryError(method, "transport_error", where) from None
        return dict(response.data) if isinstance(response.data, dict) else {}

    async def post(
        self, channel: str, message: SlackMessage, *, thread_ts: str | None = None
    ) -> str:
        args: dict[str, object] = {
            "channel": channel,
            **message.as_kwargs(),
            "unfurl_links": False,
            "unfurl_media": False,
        }
        if thread_ts:
            args["thread_ts"] = thread_ts
        data = await self._call("chat.postMessage", channel, **args)
        return str(data.get("ts", ""))

    async def permalink(self, channel: str, ts: str) -> str | None:
        """A message's link (chat.getPermalink, form-style); None when Slack gives none."""
        params: dict[str, object] = {"channel": channel, "message_ts": ts}
        try:
            link = (await self._form_call("chat.getPermalink", channel, params)).get("permalink")
        except SlackDeliveryError:
            return None
        return str(link) if link else None

    async def post_to_person(self, user: str, message: SlackMessage) -> tuple[str, str]:
        """Post into the bot's DM with ``user`` (Slack opens it); its channel and ts."""
        args = {"channel": user, **message.as_kwargs(), "unfurl_links": False}
        data = await self._call("chat.postMessage", user, **args)
        return str(data.get("channel", "")), str(data.get("ts", ""))

    async def update(self, channel: str, ts: str, message: SlackMessage) -> None:
        await self._call("chat.update", channel, channel=channel, ts=ts, **message.as_kwargs())

    async def ephemeral(
        self, channel: str, user: str, message: SlackMessage, *, thread_ts: str | None = None
    ) -> None:
        args: dict[str, object] = {"channel": channel, "user": user, **message.as_kwargs()}
        if thread_ts:
            args["thread_ts"] = thread_ts
        await self._call("chat.postEphemeral", channel, **args)

    async def open_view(self, trigger_id: str, view: Mapping[str, object]) -> str:
        return (await self.open(trigger_id, view)).id

    async def open(self, trigger_id: str, view: Mapping[str, object]) -> OpenedView:
        """Open a modal; its id and hash, for a ``views.update`` that replaces it."""
        data = await self._call("views.open", None, trigger_id=trigger_id, view=view)
        return OpenedView.of(data)

    async def update_view(
        self, view_id: str, view: Mapping[str, object], *, hash: str | None = None
    ) -> None:
        """Replace a view; with ``hash`` (of the view being replaced) Slack refuses with
        ``hash_conflict`` if it changed meanwhile."""
        args: dict[str, object] = {"view_id": view_id, "view": view}
        if hash:
            args["hash"] = hash
        await self._call("views.update", None, **args)

    async def complete_function(
        self, execution_id: str, *, outputs: dict[str, str] | None = None, error: str | None = None
    ) -> None:
        """End a workflow step: ``functions.completeSuccess`` with ``outputs``, else
        ``functions.completeError`` with ``error`` (the bot token may end the app's own
        steps)."""
        if outputs is not None:
            await self._call(
                "functions.completeSuccess",
                None,
                function_execution_id=execution_id,
                outputs=outputs,
            )
        else:
            await self._call(
                "functions.completeError", None, function_execution_id=execution_id, error=error
            )

    async def publish_home(
        self, user: str, view: Mapping[str, object], *, hash: str | None = None
    ) -> str:
        """Show ``view`` as the person's App Home tab (a 429 is retried after Retry-After);
        returns the hash Slack gave the published view. With ``hash`` (of the view last
        published) Slack refuses with ``hash_conflict`` if the tab changed since."""
        args: dict[str, object] = {"user_id": user, "view": view}
        if hash:
            args["hash"] = hash
        data = await self._call("views.publish", None, **args)
        return OpenedView.of(data).hash

    async def display_names(self, users: Sequence[str]) -> dict[str, str] | None:
        """People's display names by ``users.info`` (scope ``users:read``), else their real
        names; None at the first failure other than an unknown person (a scope the
        installation lacks, Slack unreachable): the caller stops asking."""
        names: dict[str, str] = {}
        for user in users:
            try:
                data = await self._form_call("users.info", None, {"user": user})
            except SlackDeliveryError as exc:
                if exc.code in ("user_not_found", "ratelimited"):
                    continue
                log.info("naming people stopped at users.info: %s", exc.code)
                return None
            name = _name_of(data.get("user"))
            if name:
                names[user] = name
        return names

    async def upload_file(self, upload: FileUpload) -> str:
        """Share a file in a channel (or thread) by Slack's external upload flow:
        ``files.getUploadURLExternal``, the bytes POSTed to the URL it gives (streamed from
        ``upload.content``, without the token: the URL is the permission), then
        ``files.completeUploadExternal``. Returns the file id."""
        ticket = await self._form_call(
            "files.getUploadURLExternal",
            upload.channel,
            {"filename": upload.filename, "length": upload.length},
        )
        file_id, url = str(ticket.get("file_id", "")), str(ticket.get("upload_url", ""))
        if not file_id or not url:
            raise SlackDeliveryError("files.getUploadURLExternal", "no_upload_url", upload.channel)
        await self._send_bytes(url, upload)
        complete: dict[str, object] = {
            "files": json.dumps([{"id": file_id, "title": upload.title}]),
            "channel_id": upload.channel,
            "initial_comment": upload.initial_comment,
        }
        if upload.thread_ts:
            complete["thread_ts"] = upload.thread_ts
        await self._form_call("files.completeUploadExternal", upload.channel, complete)
        return file_id

    async def _send_bytes(self, url: str, upload: FileUpload) -> None:
        """POST the bytes. A connection that could not be made (refused, unreachable, timed
        out connecting: nothing was sent) is tried again, from the content's start, up to
        ``UPLOAD_CONNECT_ATTEMPTS`` times; a failure once the connection was made (bytes may
        have gone out) is not, as the URL may have taken them."""
        seekable = upload.content.seekable()
        start = upload.content.tell() if seekable else 0
        attempts = UPLOAD_CONNECT_ATTEMPTS if seekable else 1
        session = self.client.session
        own = session is None
        http = aiohttp.ClientSession() if session is None else session
        try:
            async with waiting_elsewhere():  # a paced command's slot is free meanwhile
                async for attempt in stamina.retry_context(
                    on=nothing_sent, attempts=attempts, wait_initial=0.2, wait_max=2.0
                ):
                    with attempt:
                        if seekable:
                            upload.content.seek(start)
                        status = await post_bytes(http, url, upload, attempt.num, attempts)
        except NOT_CONNECTED:
            raise SlackDeliveryError("upload_url", "upload_unreachable", upload.channel) from None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            SLACK_API_ERRORS.labels("upload_url", "transport").inc()
            log.warning("uploading a file broke off: %s", redact(type(exc).__name__))
            raise SlackDeliveryError("upload_url", "upload_interrupted", upload.channel) from None
        finally:
            if own:
                await http.close()
        if status != 200:
            SLACK_API_ERRORS.labels("upload_url", f"http_{status}").inc()
            log.warning("uploading a file failed: HTTP %d", status)
            raise SlackDeliveryError("upload_url", f"http_{status}", upload.channel)


def _name_of(user: object) -> str:
    """A users.info ``user``'s display name, else its real name, else its handle."""
    if not isinstance(user, dict):
        return ""
    found = user.get("profile")
    profile: dict[str, object] = found if isinstance(found, dict) else {}
    for value in (profile.get("display_name"), profile.get("real_name"), user.get("real_name")):
        if isinstance(value, str) and value.strip():
            return value.strip()
    name = user.get("name")
    return name.strip() if isinstance(name, str) else ""
