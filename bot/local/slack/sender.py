"""``SlackSender``: posts to a Bolt app's ``/slack/events`` what Slack would post when a
person uses the app — slash commands, button clicks, modal input and submission, @mentions —
signed with the v0 scheme (``X-Slack-Signature`` = ``v0=`` HMAC-SHA256 of
``v0:{timestamp}:{body}``).

It works with a ``FakeSlack``: trigger_ids and response_urls come from it, clicked messages
and modals are read from it, and what the app answers to a modal submission is applied to it
(errors shown, view updated, pushed or closed), as Slack's client would.

It is as strict about time as Slack: an answer that comes after 3 s is late. The person then
sees an error (recorded in ``FakeSlack.errors_shown``), a late answer to a modal submission
is ignored (the modal stays as it was), and an event is retried with ``X-Slack-Retry-Num``
(up to 3 times). With ``transport="socket"`` the same requests go as Socket Mode envelopes
over the stand-in's WebSocket instead of signed HTTP posts.
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode

import httpx
from slack_sdk.signature import SignatureVerifier

from bot.local.slack.functions import FunctionRun
from bot.local.slack.models import (
    STATEFUL_ELEMENTS,
    BlockInputError,
    InputValue,
    JsonDict,
    Message,
    View,
    block_elements,
    entry_from_input,
    find_block,
    missing_required,
    random_id,
    state_values,
)
from bot.local.slack.server import FakeSlack
from bot.local.slack.socket_mode import EnvelopeType

Transport = Literal["http", "socket"]

FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
JSON_CONTENT_TYPE = "application/json"
ACK_DEADLINE_SECONDS = 3.0  # Slack gives up on an answer after 3 seconds
# How long a Socket Mode envelope waits for its ack: just past the deadline, so that a
# missing ack is late by SenderResult.late's measure.
_SOCKET_ACK_WAIT = ACK_DEADLINE_SECONDS + 0.1
EVENT_RETRIES = 3  # Slack retries an event it got no timely 2xx for, 3 times
# Slack waits ~0 s, 1 min and 5 min before its retries; locally the same order, compressed.
EVENT_RETRY_DELAYS = (0.0, 0.5, 1.0)
COMMAND_TIMEOUT_ERROR = 'failed with the error "operation_timeout"'
COMMAND_FAILED_ERROR = 'failed with the error "dispatch_failed"'
INTERACTION_ERROR = "The app did not respond in time: Slack shows a warning on the element"
SUBMISSION_ERROR = "We had some trouble connecting. Try again?"
STALE_SECONDS = 10 * 60  # Bolt refuses timestamps older than 5 minutes
# Slack still sends its deprecated per-app verification token in every payload; apps must
# not rely on it (they verify the signature), so any value does.
VERIFICATION_TOKEN_PLACEHOLDER = "localslack-not-a-secret"  # noqa: S105
# Socket Mode envelopes are not signed; the verifier still wants a secret to exist.
SOCKET_MODE_UNUSED_SECRET = "socket-mode-sends-no-signatures"  # noqa: S105


class Tamper(enum.StrEnum):
    """Ways to send a request Slack would never send, to test the app's verification."""

    STALE_TIMESTAMP = "stale_timestamp"  # correctly signed, but 10 minutes old
    WRONG_SIGNATURE = "wrong_signature"  # signed with another secret


class SenderInputError(ValueError):
    """An interaction Slack's client would not let a person make (submitting a closed modal,
    an option that is not on the list, a required input left empty, …)."""


@dataclass(frozen=True)
class SenderResult:
    status: int
    body: str
    json: Any
    """The answer parsed as JSON, or None when it is empty or not JSON."""
    elapsed: float
    request_body: str = field(repr=False)
    content_type: str = field(repr=False)
    problems: tuple[str, ...] = ()
    """For modal submissions: what Slack would refuse in the app's answer."""
    retries: tuple[SenderResult, ...] = ()
    """For events: the retries Slack sent because this delivery was late or failed."""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def acked_in_time(self) -> bool:
        return self.elapsed <= ACK_DEADLINE_SECONDS

    @property
    def late(self) -> bool:
        """Slack gave up on this answer: it ignores it and shows the person an error."""
        return not self.acked_in_time


def _action_ts() -> str:
    return f"{time.time():.6f}"


def _text_of(text: Any) -> str:
    return str(text.get("text", "")) if isinstance(text, dict) else str(text or "")


def _find_button(
    message: Message | None, action_id: str, value: str
) -> tuple[str, JsonDict] | None:
    if message is None or not message.blocks:
        return None
    candidates = [
        (str(block.get("block_id", "")), element)
        for block in message.blocks
        for element in block_elements(block)
        if element.get("action_id") == action_id
    ]
    exact = [c for c in candidates if str(c[1].get("value")) == value]
    matches = exact or candidates
    return matches[0] if matches else None


def _input_label(view: View, block_id: str) -> str:
    block = find_block(view.blocks, block_id) or {}
    return _text_of(block.get("label")) or block_id


class SlackSender:
    """Sends Slack's requests to ``events_url`` on behalf of the fake workspace's users."""

    def __init__(
        self,
        events_url: str,
        signing_secret: str,
        fake: FakeSlack,
        *,
        team_id: str | None = None,
        api_app_id: str = "A0GPUOPS",
        http: httpx.AsyncClient | None = None,
        timeout: float = 30.0,
        transport: Transport = "http",
        event_retry_delays: tuple[float, ...] = EVENT_RETRY_DELAYS,
    ) -> None:
        self.events_url = events_url
        self.transport: Transport = transport
        self.event_retry_delays = event_retry_delays
        self._timeout = timeout
        self.fake = fake
        self.team_id = team_id or fake.team_id
        self.api_app_id = api_app_id
        self.verification_token = VERIFICATION_TOKEN_PLACEHOLDER
        self._verifier = SignatureVerifier(signing_secret)
        self._wrong_verifier = SignatureVerifier(signing_secret + "-but-wrong")
        self._http = http or httpx.AsyncClient(timeout=timeout)
        self._owns_http = http is None
        self._sent_events: dict[str, str] = {}

    @classmethod
    def over_socket_mode(
        cls, fake: FakeSlack, *, timeout: float = 30.0, api_app_id: str = "A0GPUOPS"
    ) -> SlackSender:
        """A sender that delivers every request as a Socket Mode envelope to the app
        connected to ``fake`` (no URL, no signature)."""
        return cls(
            "",
            SOCKET_MODE_UNUSED_SECRET,
            fake,
            transport="socket",
            timeout=timeout,
            api_app_id=api_app_id,
        )

    def __repr__(self) -> str:
        return f"SlackSender(events_url={self.events_url!r}, transport={self.transport!r})"

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> SlackSender:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- the low level ----------------------------------------------------------------------

    def signed_headers(
        self,
        body: str,
        content_type: str,
        *,
        retry_num: int | None = None,
        retry_reason: str | None = None,
        tamper: Tamper | None = None,
    ) -> dict[str, str]:
        timestamp = int(time.time()) - (STALE_SECONDS if tamper is Tamper.STALE_TIMESTAMP else 0)
        verifier = self._wrong_verifier if tamper is Tamper.WRONG_SIGNATURE else self._verifier
        signature = verifier.generate_signature(timestamp=str(timestamp), body=body)
        headers = {
            "Content-Type": content_type,
            "User-Agent": "Slackbot 1.0 (localslack)",
            "X-Slack-Request-Timestamp": str(timestamp),
            "X-Slack-Signature": str(signature),
        }
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = retry_reason or "http_timeout"
        return headers

    async def post(
        self,
        body: str,
        content_type: str,
        *,
        retry_num: int | None = None,
        retry_reason: str | None = None,
        tamper: Tamper | None = None,
    ) -> SenderResult:
        """POST one signed request body to the app and read its answer."""
        started = time.perf_counter()
        if self.transport == "socket":
            if tamper is not None:
                raise SenderInputError("Socket Mode requests are not signed: nothing to tamper")
            status, text = await self._send_envelope(body, content_type, retry_num, retry_reason)
        else:
            headers = self.signed_headers(
                body, content_type, retry_num=retry_num, retry_reason=retry_reason, tamper=tamper
            )
            response = await self._http.post(
                self.events_url, content=body.encode(), headers=headers
            )
            status, text = response.status_code, response.text
        elapsed = time.perf_counter() - started
        try:
            parsed = json.loads(text) if text.strip() else None
        except ValueError:
            parsed = None
        return SenderResult(
            status=status,
            body=text,
            json=parsed,
            elapsed=elapsed,
            request_body=body,
            content_type=content_type,
        )

    async def _send_envelope(
        self, body: str, content_type: str, retry_num: int | None, retry_reason: str | None
    ) -> tuple[int, str]:
        """Deliver a request body as a Socket Mode envelope; (200, the ack's payload as
        JSON) once acknowledged, (504, "") when no ack came by Slack's deadline: Slack then
        shows the person its error and ignores an ack that comes later, so there is nothing
        more to wait for (an app that never acks took the sender's whole timeout before)."""
        kind, payload, accepts = _envelope_of(body, content_type)
        future = await self.fake.socket_mode.send(
            kind,
            payload,
            accepts_response_payload=accepts,
            retry_attempt=retry_num or 0,
            retry_reason=(retry_reason or "http_timeout") if retry_num else "",
        )
        try:
            ack = await asyncio.wait_for(future, min(self._timeout, _SOCKET_ACK_WAIT))
        except TimeoutError:
            return 504, ""
        return 200, "" if ack.payload is None else json.dumps(ack.payload)

    async def _post_event(self, body: str, tamper: Tamper | None) -> SenderResult:
        """Deliver an event as Slack does: when it is not acknowledged with a 2xx within
        3 s, send it again with ``X-Slack-Retry-Num`` 1…3, without waiting for the late
        answer (the app may still be working on the first delivery)."""
        first = asyncio.create_task(self.post(body, JSON_CONTENT_TYPE, tamper=tamper))
        attempts = [first]
        for retry_num in range(1, EVENT_RETRIES + 1):
            done, _ = await asyncio.wait({attempts[-1]}, timeout=ACK_DEADLINE_SECONDS)
            if done and attempts[-1].result().ok and attempts[-1].result().acked_in_time:
                break
            reason = "http_timeout" if not done else "http_error"
            delay = self.event_retry_delays[min(retry_num - 1, len(self.event_retry_delays) - 1)]
            await asyncio.sleep(delay)
            attempts.append(
                asyncio.create_task(
                    self.post(
                        body,
                        JSON_CONTENT_TYPE,
                        retry_num=retry_num,
                        retry_reason=reason,
                        tamper=tamper,
                    )
                )
            )
        results = await asyncio.gather(*attempts)
        return replace(results[0], retries=tuple(results[1:]))

    async def _show_error_if_late(
        self, result: SenderResult, user: str, channel: str | None, where: str, text: str
    ) -> None:
        if result.late:
            await self.fake.show_error(user, channel, where, text)
        elif not result.ok:
            await self.fake.show_error(user, channel, where, f"HTTP {result.status}: {text}")

    async def redeliver(
        self, result: SenderResult, *, retry_num: int = 1, retry_reason: str = "http_timeout"
    ) -> SenderResult:
        """Send the same request again as a Slack retry (same body, fresh signature)."""
        return await self.post(
            result.request_body,
            result.content_type,
            retry_num=retry_num,
            retry_reason=retry_reason,
        )

    async def _post_payload(
        self,
        payload: JsonDict,
        *,
        retry_num: int | None = None,
        retry_reason: str | None = None,
        tamper: Tamper | None = None,
    ) -> SenderResult:
        body = urlencode({"payload": json.dumps(payload, separators=(",", ":"))})
        return await self.post(
            body, FORM_CONTENT_TYPE, retry_num=retry_num, retry_reason=retry_reason, tamper=tamper
        )

    def _user(self, user: str) -> JsonDict:
        handle = self.fake.user_name(user).lower().replace(" ", ".")
        return {"id": user, "username": handle, "name": handle, "team_id": self.team_id}

    def _team(self) -> JsonDict:
        return {"id": self.team_id, "domain": self.fake.team_domain}

    def _interaction(self, kind: str, user: str) -> JsonDict:
        return {
            "type": kind,
            "user": self._user(user),
            "api_app_id": self.api_app_id,
            "token": self.verification_token,
            "trigger_id": self.fake.issue_trigger_id(user),
            "team": self._team(),
            "enterprise": None,
            "is_enterprise_install": False,
        }

    # -- slash commands -----------------------------------------------------------------

    async def command(
        self,
        user: str,
        channel: str,
        text: str,
        *,
        command: str = "/gpu",
        retry_num: int | None = None,
        retry_reason: str | None = None,
        tamper: Tamper | None = None,
    ) -> SenderResult:
        """``user`` types ``{command} {text}`` in ``channel``."""
        fields = {
            "token": self.verification_token,
            "team_id": self.team_id,
            "team_domain": self.fake.team_domain,
            "channel_id": channel,
            "channel_name": self.fake.channel_name(channel),
            "user_id": user,
            "user_name": self._user(user)["name"],
            "command": command,
            "text": text,
            "api_app_id": self.api_app_id,
            "is_enterprise_install": "false",
            "response_url": self.fake.new_response_url(channel, user),
            "trigger_id": self.fake.issue_trigger_id(user),
        }
        if channel == self.fake.dm_channel(user):
            self.fake.open_dm(user)  # typed in the bot's Messages tab: that DM exists
        await self.fake.note_user_action(user, channel, f"{command} {text}".rstrip())
        result = await self.post(
            urlencode(fields),
            FORM_CONTENT_TYPE,
            retry_num=retry_num,
            retry_reason=retry_reason,
            tamper=tamper,
        )
        error = COMMAND_TIMEOUT_ERROR if result.late else COMMAND_FAILED_ERROR
        if result.late or not result.ok:
            await self.fake.show_error(user, channel, "command", f"{command} {error}")
        return result

    # -- buttons on messages ------------------------------------------------------------

    async def block_action(
        self,
        user: str,
        channel: str,
        *,
        action_id: str,
        value: str,
        message_ts: str,
        block_id: str | None = None,
        thread_ts: str | None = None,
        retry_num: int | None = None,
        retry_reason: str | None = None,
        tamper: Tamper | None = None,
    ) -> SenderResult:
        """``user`` clicks the button ``action_id`` (with ``value``) on the message
        ``message_ts``. The message is read from the fake; a button no longer shown (e.g.
        removed by an edit a moment ago) can still be clicked, as by a person whose client
        had not refreshed yet."""
        message = self.fake.message(channel, message_ts)
        button = _find_button(message, action_id, value)
        element = button[1] if button else {}
        label = _text_of(element.get("text")) or action_id
        action: JsonDict = {
            "type": "button",
            "action_id": action_id,
            "block_id": block_id or (button[0] if button else random_id("", 5).lower()),
            "text": {"type": "plain_text", "text": label, "emoji": True},
            "value": value,
            "action_ts": _action_ts(),
        }
        if "style" in element:
            action["style"] = element["style"]
        thread = thread_ts or (message.thread_ts if message and message.is_reply else None)
        container: JsonDict = {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel,
            "is_ephemeral": False,
        }
        if thread:
            container["thread_ts"] = thread
        shown = (
            message.as_slack(self.team_id)
            if message
            else {"type": "message", "ts": message_ts, "text": ""}
        )
        payload = {
            **self._interaction("block_actions", user),
            "container": container,
            "channel": {"id": channel, "name": self.fake.channel_name(channel)},
            "message": shown,
            "state": {"values": state_values(message.blocks or [], {}) if message else {}},
            "response_url": self.fake.new_response_url(channel, user, message_ts=message_ts),
            "actions": [action],
        }
        await self.fake.note_user_action(user, channel, f"[clicked {label}]", thread_ts=thread)
        result = await self._post_payload(
            payload, retry_num=retry_num, retry_reason=retry_reason, tamper=tamper
        )
        await self._show_error_if_late(result, user, channel, "block_actions", INTERACTION_ERROR)
        return result

    # -- modals ---------------------------------------------------------------------------

    def _open_view(self, user: str, view_id: str) -> View:
        view = self.fake.views.get(view_id)
        if view is None:
            raise SenderInputError(f"no modal {view_id!r}")
        if not view.open:
            raise SenderInputError(f"modal {view_id!r} is closed ({view.closed_reason})")
        if view.user != user:
            raise SenderInputError(f"modal {view_id!r} is open for {view.user}, not {user}")
        return view

    def _entries_for(self, view: View, block_id: str, value: InputValue) -> dict[str, JsonDict]:
        block = find_block(view.blocks, block_id)
        if block is None:
            raise SenderInputError(f"modal {view.id} has no block {block_id!r}")
        elements = [e for e in block_elements(block) if e.get("type") in STATEFUL_ELEMENTS]
        if not elements:
            raise SenderInputError(f"block {block_id!r} has no input element")
        element = elements[0]
        try:
            entry = entry_from_input(element, value)
        except BlockInputError as exc:
            raise SenderInputError(f"{_input_label(view, block_id)}: {exc}") from exc
        return {str(element.get("action_id", "")): entry}

    async def view_block_action(
        self,
        user: str,
        view_id: str,
        *,
        action_id: str,
        block_id: str,
        selected_value: InputValue,
        tamper: Tamper | None = None,
    ) -> SenderResult | None:
        """``user`` changes the element ``block_id``/``action_id`` in an open modal. Slack
        sends ``block_actions`` for it only when the element is in an actions or section
        block, or in an input block with ``dispatch_action: true``; otherwise the value is
        only kept (it shows in the modal's state) and None is returned."""
        view = self._open_view(user, view_id)
        block = find_block(view.blocks, block_id) or {}
        element = next((e for e in block_elements(block) if e.get("action_id") == action_id), None)
        if element is None or element.get("type") not in STATEFUL_ELEMENTS:
            raise SenderInputError(f"modal {view_id} has no input {block_id}/{action_id}")
        try:
            entry = entry_from_input(element, selected_value)
        except BlockInputError as exc:
            raise SenderInputError(f"{_input_label(view, block_id)}: {exc}") from exc
        self.fake.enter_values(view_id, {block_id: {action_id: entry}})
        await self.fake.note_user_action(
            user, None, f"[{_input_label(view, block_id)}: {selected_value}]"
        )
        if block.get("type") == "input" and not block.get("dispatch_action"):
            return None
        payload = {
            **self._interaction("block_actions", user),
            "container": {"type": "view", "view_id": view_id},
            "view": view.as_slack(),
            "actions": [
                {**entry, "action_id": action_id, "block_id": block_id, "action_ts": _action_ts()}
            ],
        }
        result = await self._post_payload(payload, tamper=tamper)
        await self._show_error_if_late(result, user, None, "block_actions", INTERACTION_ERROR)
        return result

    async def view_submission(
        self,
        user: str,
        view_id: str,
        values: dict[str, InputValue] | None = None,
        *,
        tamper: Tamper | None = None,
    ) -> SenderResult:
        """``user`` fills in ``values`` (block_id → text, number, option value(s), or None to
        clear) and presses submit. Inputs not given keep what was entered before or their
        initial value. The app's answer is applied to the fake (errors shown, view updated /
        pushed / closed); what Slack would refuse in it is in ``result.problems``."""
        view = self._open_view(user, view_id)
        entries = {
            block_id: self._entries_for(view, block_id, value)
            for block_id, value in (values or {}).items()
        }
        merged = {**view.entered}
        for block_id, by_action in entries.items():
            merged[block_id] = {**merged.get(block_id, {}), **by_action}
        missing = missing_required(view.blocks, state_values(view.blocks, merged))
        if missing:
            labels = ", ".join(_input_label(view, b) for b in missing)
            raise SenderInputError(f"required and empty (Slack would not submit): {labels}")
        self.fake.enter_values(view_id, entries)
        payload = {
            **self._interaction("view_submission", user),
            "view": view.as_slack(),
            "response_urls": [],
        }
        title = _text_of(view.view.get("title")) or view.callback_id
        await self.fake.note_user_action(user, None, f"[submitted {title}]")
        result = await self._post_payload(payload, tamper=tamper)
        if result.late:
            # Slack stopped waiting: the modal stays open as it was, whatever came later.
            await self.fake.show_error(user, None, "view_submission", SUBMISSION_ERROR)
            late = f"answered after {result.elapsed:.2f}s: Slack ignored the answer"
            return replace(result, problems=(late,))
        problems = await self.fake.apply_view_response(view_id, result.status, result.json)
        if not result.ok:
            await self.fake.show_error(user, None, "view_submission", SUBMISSION_ERROR)
        return replace(result, problems=tuple(problems))

    async def view_closed(
        self, user: str, view_id: str, *, tamper: Tamper | None = None
    ) -> SenderResult | None:
        """``user`` closes (cancels) the modal. Slack tells the app only when the view has
        ``notify_on_close``; otherwise None is returned."""
        view = self._open_view(user, view_id)
        payload = {
            **self._interaction("view_closed", user),
            "view": view.as_slack(),
            "is_cleared": False,
        }
        payload.pop("trigger_id")
        notify = bool(view.view.get("notify_on_close"))
        await self.fake.close_view(view_id, reason="closed_by_user")
        title = _text_of(view.view.get("title")) or view.callback_id
        await self.fake.note_user_action(user, None, f"[closed {title}]")
        return await self._post_payload(payload, tamper=tamper) if notify else None

    # -- App Home -------------------------------------------------------------------------

    async def home_action(
        self, user: str, *, action_id: str, value: str, tamper: Tamper | None = None
    ) -> SenderResult:
        """``user`` clicks the button ``action_id`` with ``value`` on their Home tab (as it
        was last published: a button that is not there cannot be clicked)."""
        home = self.fake.home_of(user)
        if home is None:
            raise SenderInputError(f"no Home tab published for {user}")
        found = next(
            (
                (str(block.get("block_id", "")), element)
                for block in home.blocks
                for element in block_elements(block)
                if element.get("action_id") == action_id and element.get("value") == value
            ),
            None,
        )
        if found is None:
            raise SenderInputError(f"{user}'s Home tab has no {action_id} button for {value!r}")
        block_id, element = found
        label = _text_of(element.get("text")) or action_id
        payload = {
            **self._interaction("block_actions", user),
            "container": {"type": "view", "view_id": home.id},
            "view": home.as_slack(),
            "actions": [
                {
                    "type": "button",
                    "action_id": action_id,
                    "block_id": block_id,
                    "text": {"type": "plain_text", "text": label, "emoji": True},
                    "value": value,
                    "action_ts": _action_ts(),
                }
            ],
        }
        await self.fake.note_user_action(user, None, f"[clicked {label} on the Home tab]")
        return await self._post_payload(payload, tamper=tamper)

    # -- events ---------------------------------------------------------------------------

    async def mention(
        self,
        user: str,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        event_id: str | None = None,
        retry_num: int | None = None,
        retry_reason: str | None = None,
        tamper: Tamper | None = None,
    ) -> SenderResult:
        """``user`` writes ``@gpuops {text}`` in ``channel`` (in the thread ``thread_ts`` if
        given). The message is stored in the fake. Passing the ``event_id`` of an event sent
        before resends that very envelope (a Slack retry: use ``retry_num``)."""
        if event_id is not None and event_id in self._sent_events:
            return await self.post(
                self._sent_events[event_id],
                JSON_CONTENT_TYPE,
                retry_num=retry_num,
                retry_reason=retry_reason,
                tamper=tamper,
            )
        return await self._send_event(
            self._app_mention(
                user,
                channel,
                await self._mention_message(user, channel, text, thread_ts),
                thread_ts,
            ),
            event_id,
            retry_num=retry_num,
            retry_reason=retry_reason,
            tamper=tamper,
        )

    async def _mention_message(
        self, user: str, channel: str, text: str, thread_ts: str | None
    ) -> Message:
        mention = f"<@{self.fake.bot_user_id}>"
        full_text = text if text.startswith(mention) else f"{mention} {text}"
        return await self.fake.post_user_message(channel, user, full_text, thread_ts=thread_ts)

    async def app_home_opened(
        self, user: str, *, tab: str = "home", tamper: Tamper | None = None
    ) -> SenderResult:
        """``user`` opens the app's Home tab (``app_home_opened``; ``view`` is the Home view
        published for them before, if any)."""
        channel = self.fake.open_dm(user)
        event: JsonDict = {
            "type": "app_home_opened",
            "user": user,
            "channel": channel,
            "tab": tab,
            "event_ts": _action_ts(),
        }
        home = self.fake.homes.get(user)
        if home is not None:
            event["view"] = home.as_slack()
        await self.fake.note_user_action(user, None, f"[opened the app's {tab} tab]")
        return await self._send_event(event, None, tamper=tamper)

    async def function_executed(
        self,
        callback_id: str,
        inputs: dict[str, Any],
        *,
        run: FunctionRun | None = None,
        retry_num: int | None = None,
    ) -> tuple[FunctionRun, SenderResult]:
        """A workflow reaches the app's step ``callback_id`` with ``inputs``: a new run and
        its ``function_executed`` event. With ``run``, that run's event is sent again in a
        new envelope (a new event_id: what a second delivery of one execution looks like)."""
        run = run or self.fake.start_function(callback_id, inputs)
        event = self.fake.functions.event(run)
        return run, await self._send_event(event, None, retry_num=retry_num)

    async def _send_event(
        self,
        event: JsonDict,
        event_id: str | None,
        *,
        retry_num: int | None = None,
        retry_reason: str | None = None,
        tamper: Tamper | None = None,
    ) -> SenderResult:
        """Send an ``event_callback``; with no explicit ``retry_num``, Slack's retries follow
        a late or failed delivery."""
        envelope = self._event_envelope(event, event_id)
        body = json.dumps(envelope, separators=(",", ":"))
        self._sent_events[envelope["event_id"]] = body
        if retry_num is not None:
            return await self.post(
                body,
                JSON_CONTENT_TYPE,
                retry_num=retry_num,
                retry_reason=retry_reason,
                tamper=tamper,
            )
        return await self._post_event(body, tamper)

    def _app_mention(
        self, user: str, channel: str, message: Message, thread_ts: str | None
    ) -> JsonDict:
        mention = f"<@{self.fake.bot_user_id}>"
        rest = message.text[len(mention) :]
        event: JsonDict = {
            "type": "app_mention",
            "user": user,
            "text": message.text,
            "ts": message.ts,
            "channel": channel,
            "event_ts": message.ts,
            "team": self.team_id,
            "client_msg_id": str(uuid.uuid4()),
            "blocks": [
                {
                    "type": "rich_text",
                    "block_id": random_id("", 5).lower(),
                    "elements": [
                        {
                            "type": "rich_text_section",
                            "elements": [
                                {"type": "user", "user_id": self.fake.bot_user_id},
                                {"type": "text", "text": rest},
                            ],
                        }
                    ],
                }
            ],
        }
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
        return event

    def _event_envelope(self, event: JsonDict, event_id: str | None) -> JsonDict:
        return {
            "token": self.verification_token,
            "team_id": self.team_id,
            "context_team_id": self.team_id,
            "api_app_id": self.api_app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or random_id("Ev"),
            "event_time": int(float(event["event_ts"])),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": self.team_id,
                    "user_id": self.fake.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": random_id("4-", 24),
        }

    async def url_verification(
        self, challenge: str, *, tamper: Tamper | None = None
    ) -> SenderResult:
        body = json.dumps(
            {"token": self.verification_token, "challenge": challenge, "type": "url_verification"}
        )
        return await self.post(body, JSON_CONTENT_TYPE, tamper=tamper)


def _envelope_of(body: str, content_type: str) -> tuple[EnvelopeType, JsonDict, bool]:
    """The Socket Mode envelope type, payload and ``accepts_response_payload`` for a request
    body Slack would otherwise POST to ``/slack/events``."""
    if content_type == JSON_CONTENT_TYPE:
        payload = json.loads(body)
        if payload.get("type") != "event_callback":
            raise SenderInputError(f"no Socket Mode envelope for {payload.get('type')!r}")
        return "events_api", payload, False
    fields = dict(parse_qsl(body, keep_blank_values=True))
    if "payload" in fields:
        interaction = json.loads(fields["payload"])
        accepts = interaction.get("type") in ("view_submission", "block_suggestion")
        return "interactive", interaction, accepts
    return "slash_commands", fields, True
