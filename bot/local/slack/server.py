"""``FakeSlack``: a local stand-in for Slack's Web API and response URLs, on 127.0.0.1.

The bot talks to it through slack_sdk (``AsyncWebClient(base_url=fake.api_url)``) and
``respond()``; tests, the demo console and benchmarks read what the bot did from its state
(``calls``, ``messages``, ``ephemerals``, ``views``, ``response_posts``), subscribe to its
events, and arm faults (rate limits, HTTP 500, ``not_in_channel`` …).

Answers follow Slack's shapes and error names; Block Kit and modal definitions are checked
against the limits Slack enforces, so a bot that passes here does not fail on
``invalid_blocks`` in a real workspace for the usual reasons.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import inspect
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from aiohttp import web
from pydantic import BaseModel

from bot.local.slack.files import SlackFiles, UploadedFile, UploadRefused
from bot.local.slack.functions import FunctionCallError, FunctionRun, FunctionRuns
from bot.local.slack.models import (
    EditSource,
    Ephemeral,
    EphemeralPosted,
    EphemeralSource,
    ErrorShown,
    FakeEvent,
    FunctionCompleted,
    HomePublished,
    JsonDict,
    Message,
    MessageDeleted,
    MessageEdited,
    MessagePosted,
    MessageSource,
    MessageVersion,
    ResponsePost,
    SlackCall,
    UserActed,
    View,
    ViewClosed,
    ViewOpened,
    ViewUpdated,
    bare_user_ids,
    block_problems,
    fallback_problems,
    fill_block_ids,
    random_id,
    stateful_elements,
    truncated_text,
    view_problems,
)
from bot.local.slack.socket_mode import SocketModeHub

logger = logging.getLogger(__name__)

Subscriber = Callable[[FakeEvent], Awaitable[None] | None]
_T = TypeVar("_T")

DEFAULT_CHANNELS = {"C0GPUOPS": "gpu-ops"}
# The bot scopes manifest.yml asks for (tests/contract/test_manifest.py holds them equal):
# what an installation of the app grants unless a test says otherwise.
BOT_SCOPES = frozenset(
    {
        "app_mentions:read",
        "channels:read",
        "chat:write",
        "commands",
        "files:write",
        "groups:read",
        "usergroups:read",
        "users:read",
    }
)
_CONVERSATION_READ = ("channels:read", "groups:read", "im:read", "mpim:read")
# The bot scopes Slack's method docs list for methods modelled here (any one of them lets
# the call in; the conversations methods then need the one of the conversation's type). A
# method not listed is not checked: the stand-in is never stricter than Slack.
METHOD_SCOPES: dict[str, tuple[str, ...]] = {
    "chat.postMessage": ("chat:write",),
    "chat.update": ("chat:write",),
    "chat.postEphemeral": ("chat:write",),
    "usergroups.users.list": ("usergroups:read",),
    "users.info": ("users:read",),
    "users.lookupByEmail": ("users:read.email",),
    "files.getUploadURLExternal": ("files:write",),
    "files.completeUploadExternal": ("files:write",),
    "conversations.info": _CONVERSATION_READ,
    "conversations.members": _CONVERSATION_READ,
}
RESPONSE_URL_MAX_USES = 5  # Slack accepts up to 5 posts to one response_url …
RESPONSE_URL_TTL_SECONDS = 30 * 60  # … within 30 minutes
VIEW_STACK_LIMIT = 3
# Fields slack_sdk sends JSON-encoded inside a form body.
_JSON_FIELDS = ("blocks", "attachments", "view", "metadata", "outputs")


class ApiError(Exception):
    """A Web API method's ``{"ok": false, "error": …}`` answer."""

    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra

    def body(self) -> JsonDict:
        return {"ok": False, "error": self.error, **self.extra}


class SlackFault(BaseModel):
    """An armed failure: the next ``times`` calls of ``method`` (``*`` = any) fail."""

    method: str = "*"
    error: str = "ratelimited"
    times: int = 1  # -1 = until cleared
    status: int | None = None  # default: 429 for "ratelimited", else 200
    retry_after: int | None = None

    @property
    def http_status(self) -> int:
        if self.status is not None:
            return self.status
        return 429 if self.error == "ratelimited" else 200

    def headers(self) -> dict[str, str]:
        if self.retry_after is not None:
            return {"Retry-After": str(self.retry_after)}
        return {"Retry-After": "1"} if self.http_status == 429 else {}


@dataclass
class _Trigger:
    user: str
    issued_at: float
    used: bool = False


@dataclass
class _ResponseTarget:
    channel: str
    user: str
    message_ts: str | None
    created_at: float
    uses: int = 0


def _json_response(
    status: int, body: Any, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps(body),
        content_type="application/json",
        headers=dict(headers or {}),
    )


def _decode_json_fields(args: JsonDict) -> JsonDict:
    for name in _JSON_FIELDS:
        value = args.get(name)
        if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
            with contextlib.suppress(ValueError):
                args[name] = json.loads(value)
    return args


async def _read_api_args(request: web.Request) -> tuple[JsonDict, str | None]:
    """The call's arguments (query, form or JSON body) and its token, kept apart.

    As Slack: a JSON body never carries the token (only the Authorization header does; a
    ``token`` in it is ignored, so a call with no header is ``not_authed``), a form-encoded
    body or the query may."""
    args: JsonDict = dict(request.query)
    if request.method == "POST" and request.can_read_body:
        if request.content_type == "application/json":
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("the JSON body is not an object")
            args.update({k: v for k, v in body.items() if k != "token"})
        else:
            form = await request.post()
            args.update({k: v for k, v in form.items() if isinstance(v, str)})
    token = args.pop("token", None)
    authorization = request.headers.get("Authorization", "")
    if authorization.lower().startswith("bearer "):
        token = authorization[len("bearer ") :].strip()
    return _decode_json_fields(args), (str(token) if token else None)


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.lower() in ("1", "true", "yes")
    return bool(value)


def _optional_str(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


class FakeSlack:
    """The fake Slack workspace: Web API at ``/api/<method>``, response URLs at
    ``/response/<token>``, control endpoints under ``/_fake/``."""

    def __init__(
        self,
        bot_token: str,
        *,
        bot_user_id: str = "UBOT",
        bot_id: str = "B0GPUOPS",
        team_id: str = "T0GPUOPS",
        team_domain: str = "gpuops",
        app_id: str = "A0GPUOPS",
        channels: Mapping[str, str] | None = None,
        not_member_channels: Mapping[str, str] | Iterable[str] | None = None,
        private_channels: Mapping[str, str] | Iterable[str] | None = None,
        app_token: str | None = None,
        users: Mapping[str, str] | None = None,
        usergroups: Mapping[str, list[str]] | None = None,
        emails: Mapping[str, str] | None = None,
        trigger_ttl: float = 3.0,
        scopes: Iterable[str] = BOT_SCOPES,
    ) -> None:
        self._bot_token = bot_token
        self.scopes: frozenset[str] = frozenset(scopes)
        """The bot scopes the installation granted: a method called without its scope is
        refused with ``missing_scope``, as Slack does (METHOD_SCOPES)."""
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.team_id = team_id
        self.team_domain = team_domain
        self.app_id = app_id
        self.channels: dict[str, str] = dict(DEFAULT_CHANNELS if channels is None else channels)
        self.not_member_channels: dict[str, str] = _channel_names(not_member_channels)
        # Private channels the bot is not in: to the bot they do not exist.
        self.private_channels: dict[str, str] = _channel_names(private_channels)
        self.app_token = app_token
        self.dms: set[str] = set()
        """DM channels between the bot and a person that exist (opened by either side)."""
        self.homes: dict[str, View] = {}
        """user → the App Home view published for them (``views.publish``)."""
        self.errors_shown: list[ErrorShown] = []
        self.delays: dict[str, float] = {}
        self.spec_problems: list[str] = []
        """What Slack accepts but SPEC §4.6 forbids, noticed in the bot's messages (a user
        id written bare in a text fallback): tests assert it stays empty."""
        self.users: dict[str, str] = dict(users or {})
        self.usergroups: dict[str, list[str]] = {k: list(v) for k, v in (usergroups or {}).items()}
        self.emails: dict[str, str] = dict(emails or {})
        """user → their e-mail address (``users.lookupByEmail`` finds them by it)."""
        self.trigger_ttl = trigger_ttl
        self.token_refusal: str | None = None
        self.messages_tab_enabled = True
        """The app's ``features.app_home.messages_tab_enabled`` (manifest.yml sets it, as
        gpuops DMs people): with it off, Slack refuses a post into the bot's DM with a
        person, ``messages_tab_disabled``."""
        self.org_install = False
        """When set, the bot token is an org-level one (an app installed org-wide, as a
        Workflow step needs): auth.test says so, and methods whose ``team_id`` Slack
        documents as "required if org token is used" refuse a call without it."""
        """When set (``token_revoked``, ``account_inactive`` …), Slack refuses the bot token
        on every method with that error, as it does once a token is revoked."""

        self.functions = FunctionRuns(app_id)
        """Workflow runs of the app's custom steps (``function_executed``)."""

        self.calls: list[SlackCall] = []
        self.messages: dict[str, list[Message]] = {}
        self.ephemerals: list[Ephemeral] = []
        self.views: dict[str, View] = {}
        self.response_posts: list[ResponsePost] = []
        self.events: list[FakeEvent] = []
        self._faults: list[SlackFault] = []
        self._triggers: dict[str, _Trigger] = {}
        self._response_targets: dict[str, _ResponseTarget] = {}
        self._view_stacks: dict[str, list[str]] = {}
        self._subscribers: list[Subscriber] = []
        self._last_ts_micros = 0
        self._changed = asyncio.Event()

        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.app = web.Application()
        self.app.router.add_route("*", "/api/{method}", self._api)
        self.app.router.add_post("/response/{token}", self._response_url)
        self.uploads = SlackFiles(lambda: self.base_url)
        self.app.router.add_post("/upload/v1/{token}", self.uploads.receive)
        self.socket_mode = SocketModeHub(app_id, lambda: self.base_url)
        self.app.router.add_get("/socket-mode/{ticket}", self.socket_mode.handle)
        self.app.router.add_post("/_fake/reset", self._control_reset)
        self.app.router.add_get("/_fake/calls", self._control_calls)
        self.app.router.add_post("/_fake/faults", self._control_add_fault)
        self.app.router.add_delete("/_fake/faults", self._control_clear_faults)
        self._methods: dict[str, Callable[[JsonDict], Awaitable[JsonDict]]] = {
            "auth.test": self._auth_test,
            "apps.connections.open": self._apps_connections_open,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "chat.getPermalink": self._chat_get_permalink,
            "views.open": self._views_open,
            "views.update": self._views_update,
            "views.push": self._views_push,
            "views.publish": self._views_publish,
            "conversations.open": self._conversations_open,
            "usergroups.users.list": self._usergroups_users_list,
            "users.info": self._users_info,
            "users.lookupByEmail": self._users_lookup_by_email,
            "conversations.info": self._conversations_info,
            "conversations.members": self._conversations_members,
            "files.getUploadURLExternal": self._files_get_upload_url,
            "files.completeUploadExternal": self._files_complete_upload,
        }

    def __repr__(self) -> str:
        return f"FakeSlack(team_id={self.team_id!r}, port={self.port!r})"

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on host:port (0 = any free port); returns ``api_url``."""
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1])
        return self.api_url

    async def stop(self) -> None:
        await self.socket_mode.close_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("FakeSlack is not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        """The ``base_url`` for slack_sdk's web clients."""
        return f"{self.base_url}/api/"

    def reset(self) -> None:
        """Forget everything that happened (calls, messages, views, faults …); keep the
        workspace (channels, users, user groups, membership)."""
        self.calls.clear()
        self.messages.clear()
        self.ephemerals.clear()
        self.views.clear()
        self.homes.clear()
        self.errors_shown.clear()
        self.spec_problems.clear()
        self.response_posts.clear()
        self.events.clear()
        self.functions.runs.clear()
        self._faults.clear()
        self._triggers.clear()
        self._response_targets.clear()
        self._view_stacks.clear()
        self.uploads.reset()
        self._notify()

    # -- workspace --------------------------------------------------------------------------

    def set_bot_member(self, channel: str, member: bool) -> None:
        """Add the bot to a known channel or remove it (then posts get ``not_in_channel``)."""
        name = self.channels.pop(channel, None) or self.not_member_channels.pop(channel, None)
        (self.channels if member else self.not_member_channels)[channel] = name or channel
        self._notify()

    def user_name(self, user: str) -> str:
        return self.users.get(user, user)

    def channel_name(self, channel: str) -> str:
        if channel.startswith("D"):
            return "directmessage"
        for known in (self.channels, self.not_member_channels, self.private_channels):
            if channel in known:
                return known[channel]
        return channel

    @staticmethod
    def dm_channel(user: str) -> str:
        """The DM channel id a post to a user id lands in."""
        return "D" + user[1:]

    def open_dm(self, user: str) -> str:
        """The person opened the bot's Messages tab: their DM with the bot exists now."""
        channel = self.dm_channel(user)
        self.dms.add(channel)
        return channel

    def delay(self, method: str, seconds: float) -> None:
        """Answer every call of ``method`` only after ``seconds`` (0 = no delay): a slow
        Web API, e.g. a user-group look-up that takes 4 s."""
        if seconds > 0:
            self.delays[method] = seconds
        else:
            self.delays.pop(method, None)

    async def show_error(self, user: str, channel: str | None, where: str, text: str) -> None:
        """Record what Slack's client shows a person when the app did not answer in time."""
        shown = ErrorShown(user=user, channel=channel, where=where, text=text, at=time.time())
        self.errors_shown.append(shown)
        await self._emit(shown)

    def errors_shown_to(self, user: str) -> list[ErrorShown]:
        return [e for e in self.errors_shown if e.user == user]

    # -- interaction plumbing for the sender --------------------------------------------------

    def issue_trigger_id(self, user: str) -> str:
        """A trigger_id as Slack puts in an interaction: one use, valid ``trigger_ttl`` s."""
        trigger_id = (
            f"{secrets.randbelow(10**11)}.{secrets.randbelow(10**9)}.{secrets.token_hex(16)}"
        )
        self._triggers[trigger_id] = _Trigger(user=user, issued_at=time.monotonic())
        return trigger_id

    def new_response_url(self, channel: str, user: str, *, message_ts: str | None = None) -> str:
        """A response_url for an interaction by ``user`` in ``channel``; ``message_ts`` is the
        message the interaction came from (what ``replace_original`` / ``delete_original``
        act on)."""
        token = secrets.token_urlsafe(18)
        self._response_targets[token] = _ResponseTarget(
            channel=channel, user=user, message_ts=message_ts, created_at=time.monotonic()
        )
        return f"{self.base_url}/response/{token}"

    async def post_user_message(
        self, channel: str, user: str, text: str, *, thread_ts: str | None = None
    ) -> Message:
        """Store a message a person wrote (e.g. the one carrying an @mention)."""
        message = Message(
            channel=channel,
            ts=self._next_ts(),
            thread_ts=thread_ts,
            text=text,
            user=user,
            source="user",
            posted_at=time.time(),
        )
        self._store_message(message)
        await self._emit(MessagePosted(message=message.model_copy(deep=True)))
        return message

    async def note_user_action(
        self, user: str, channel: str | None, text: str, *, thread_ts: str | None = None
    ) -> None:
        """Tell subscribers what a person did (typed a command, clicked, submitted)."""
        await self._emit(
            UserActed(user=user, channel=channel, text=text, thread_ts=thread_ts, at=time.time())
        )

    # -- state queries ---------------------------------------------------------------------

    def message(self, channel: str, ts: str) -> Message | None:
        return next((m for m in self.messages.get(channel, []) if m.ts == ts), None)

    def thread(self, channel: str, root_ts: str) -> list[Message]:
        """The root message followed by its replies, like ``conversations.replies``."""
        return [
            m
            for m in self.messages.get(channel, [])
            if not m.deleted and (m.ts == root_ts or m.thread_ts == root_ts)
        ]

    def replies(self, channel: str, root_ts: str) -> list[Message]:
        return [m for m in self.thread(channel, root_ts) if m.ts != root_ts]

    def ephemerals_for(self, user: str, channel: str | None = None) -> list[Ephemeral]:
        return [e for e in self.ephemerals if e.user == user and channel in (None, e.channel)]

    def open_views_for(self, user: str) -> list[View]:
        """The user's modal stack, bottom first."""
        return [self.views[v] for v in self._view_stacks.get(user, [])]

    def last_view_for(self, user: str, *, open_only: bool = False) -> View | None:
        candidates = [
            v for v in self.views.values() if v.user == user and (v.open or not open_only)
        ]
        return candidates[-1] if candidates else None

    def calls_to(self, method: str) -> list[SlackCall]:
        return [c for c in self.calls if c.method == method]

    # -- events -------------------------------------------------------------------------------

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback`` (sync or async) with every new event; returns an unsubscribe."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    async def wait_for(
        self, predicate: Callable[[], _T | Literal[False] | None], *, within: float = 20.0
    ) -> _T:
        """Wait until ``predicate()`` is truthy (re-checked on every call and event) and
        return its value; TimeoutError after ``within`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            result = predicate()
            if result:
                return result
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"FakeSlack.wait_for: condition not met in {within}s")
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _emit(self, event: FakeEvent) -> None:
        self.events.append(event)
        self._notify()
        for callback in list(self._subscribers):
            try:
                result = callback(event)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.exception("a FakeSlack subscriber failed on %s", event.kind)

    # -- faults ------------------------------------------------------------------------------

    def fail(
        self,
        method: str,
        error: str = "ratelimited",
        *,
        times: int = 1,
        status: int | None = None,
        retry_after: int | None = None,
    ) -> SlackFault:
        """Make the next ``times`` calls of ``method`` (``*`` = any; -1 = until cleared)
        fail with ``error``: HTTP 429 + ``Retry-After`` for ``ratelimited``, else HTTP 200,
        unless ``status`` says otherwise (e.g. 500)."""
        fault = SlackFault(
            method=method, error=error, times=times, status=status, retry_after=retry_after
        )
        self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        self._faults.clear()

    def _take_fault(self, method: str) -> SlackFault | None:
        for fault in self._faults:
            if fault.method in (method, "*") and fault.times != 0:
                if fault.times > 0:
                    fault.times -= 1
                    if fault.times == 0:
                        self._faults.remove(fault)
                return fault
        return None

    # -- Web API dispatch ---------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        call = SlackCall(method=method, args={}, at=time.time(), http_method=request.method)
        self.calls.append(call)
        headers: Mapping[str, str] = {}
        try:
            call.args, token = await _read_api_args(request)
        except ValueError:
            status, body = 200, ApiError("invalid_json").body()
        else:
            status, body, headers = await self._dispatch(method, call.args, token)
        call.status, call.ok, call.error = status, bool(body.get("ok")), body.get("error")
        self._notify()
        return _json_response(status, body, headers)

    async def _dispatch(
        self, method: str, args: JsonDict, token: str | None
    ) -> tuple[int, JsonDict, Mapping[str, str]]:
        if token is None:
            return 200, ApiError("not_authed").body(), {}
        token_error = self._token_error(method, token)
        if token_error is not None:
            return 200, ApiError(token_error).body(), {}
        handler = self._methods.get(method) or self._function_method(method, token)
        if handler is None:
            return 200, ApiError("unknown_method").body(), {}
        try:
            self._require_scope(*METHOD_SCOPES.get(method, ()))
        except ApiError as exc:
            return 200, exc.body(), {}
        if method in self.delays:
            await asyncio.sleep(self.delays[method])
        fault = self._take_fault(method)
        if fault is not None:
            return fault.http_status, ApiError(fault.error).body(), fault.headers()
        try:
            return 200, await handler(args), {}
        except ApiError as exc:
            return 200, exc.body(), {}

    def _require_scope(self, *accepted: str) -> None:
        """Slack's ``missing_scope`` (with ``needed`` and ``provided``) unless one of
        ``accepted`` was granted; nothing is needed when ``accepted`` is empty."""
        if accepted and self.scopes.isdisjoint(accepted):
            raise ApiError(
                "missing_scope", needed=",".join(accepted), provided=",".join(sorted(self.scopes))
            )

    def _token_error(self, method: str, token: str) -> str | None:
        """Web API methods take the bot token (or a running step's own token, revoked once
        the step completes); ``apps.connections.open`` only the app-level token (``xapp-…``)."""
        standing = self.functions.token_state(token)
        if standing is not None:
            if method == "apps.connections.open":
                return "not_allowed_token_type"
            return "token_revoked" if standing == "revoked" else None
        is_bot = hmac.compare_digest(token.encode(), self._bot_token.encode())
        is_app = self.app_token is not None and hmac.compare_digest(
            token.encode(), self.app_token.encode()
        )
        if method == "apps.connections.open":
            return None if is_app else ("not_allowed_token_type" if is_bot else "invalid_auth")
        if is_app:
            return "not_allowed_token_type"
        if is_bot:
            return self.token_refusal
        return "invalid_auth"

    # -- custom steps (functions) -----------------------------------------------------------

    def start_function(self, callback_id: str, inputs: Mapping[str, Any]) -> FunctionRun:
        """A workflow reaches the app's step ``callback_id``: its run (send its
        ``function_executed`` event with ``SlackSender.function_executed``)."""
        return self.functions.start(callback_id, dict(inputs))

    def _function_method(
        self, method: str, token: str
    ) -> Callable[[JsonDict], Awaitable[JsonDict]] | None:
        if method not in ("functions.completeSuccess", "functions.completeError"):
            return None
        success = method == "functions.completeSuccess"

        async def complete(args: JsonDict) -> JsonDict:
            try:
                answer = self.functions.complete(args, token, success=success)
            except FunctionCallError as exc:
                raise ApiError(exc.error, **exc.extra) from None
            run = self.functions.runs[str(args["function_execution_id"])]
            await self._emit(
                FunctionCompleted(
                    execution_id=run.execution_id,
                    callback_id=run.function.callback_id,
                    success=success,
                    outputs=run.outputs,
                    error=run.error,
                    at=time.time(),
                )
            )
            return answer

        return complete

    # -- channels and content ---------------------------------------------------------------

    def _channel_id(self, raw: Any) -> str:
        channel = str(raw or "").strip()
        name = channel.lstrip("#")
        for known in (self.channels, self.not_member_channels):
            match = next((cid for cid, cname in known.items() if cname == name), None)
            if match is not None:
                return match
        return channel

    def _postable_channel(self, raw: Any) -> str:
        """Where a post to ``raw`` lands, as Slack decides: a user id opens (or reuses) the
        DM with that person; a ``D…`` id only if that DM exists; a public channel the bot is
        not in gives ``not_in_channel``; a private channel it is not in, or an unknown id,
        ``channel_not_found``."""
        channel = self._channel_id(raw)
        if channel[:1] in ("U", "W"):
            return self.open_dm(channel)
        if channel in self.dms or channel in self.channels:
            return channel
        if channel in self.not_member_channels:
            raise ApiError("not_in_channel")
        raise ApiError("channel_not_found")

    def _content(self, args: JsonDict) -> tuple[str | None, list[JsonDict] | None]:
        text, blocks = args.get("text"), args.get("blocks")
        if blocks is not None:
            problems = block_problems(blocks)
            if problems:
                raise ApiError(
                    "invalid_blocks",
                    errors=problems,
                    response_metadata={"messages": [f"[ERROR] {p}" for p in problems]},
                )
            blocks = fill_block_ids(blocks)
        if not text and not blocks and not args.get("attachments"):
            raise ApiError("no_text")
        missing = fallback_problems(text, blocks)
        if missing:
            raise ApiError(
                "no_text", response_metadata={"messages": [f"[ERROR] {p}" for p in missing]}
            )
        self._note_bare_user_ids(str(text or ""))
        return (None if text is None else str(text)), blocks

    def _note_bare_user_ids(self, text: str) -> None:
        for user in bare_user_ids(text, self.users):
            self.spec_problems.append(f"the text {text[:80]!r} names {user} bare, not <@{user}>")

    def _note_thread_root(self, channel: str, thread_ts: str) -> None:
        """Slack documents ``thread_ts`` as "another message's ts" and says to use a
        parent's, never a reply's; it documents no error for other values, so the stand-in
        posts and notes the misuse rather than refuse."""
        root = self.message(channel, thread_ts)
        if root is None:
            self.spec_problems.append(f"thread_ts {thread_ts} names no message in {channel}")
        elif root.is_reply:
            self.spec_problems.append(f"thread_ts {thread_ts} names a reply, not its parent")

    def _next_ts(self) -> str:
        micros = max(int(time.time() * 1_000_000), self._last_ts_micros + 1)
        self._last_ts_micros = micros
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"

    def _store_message(self, message: Message) -> None:
        self.messages.setdefault(message.channel, []).append(message)
        if message.is_reply and message.thread_ts is not None:
            root = self.message(message.channel, message.thread_ts)
            if root is not None:
                root.reply_count += 1
                root.latest_reply = message.ts

    async def _post_bot_message(
        self,
        channel: str,
        text: str | None,
        blocks: list[JsonDict] | None,
        thread_ts: str | None,
        source: MessageSource,
        files: list[JsonDict] | None = None,
    ) -> Message:
        if thread_ts is not None:
            self._note_thread_root(channel, thread_ts)
        message = Message(
            channel=channel,
            ts=self._next_ts(),
            thread_ts=thread_ts,
            text=text or "",
            blocks=blocks,
            user=self.bot_user_id,
            bot_id=self.bot_id,
            source=source,
            posted_at=time.time(),
            files=list(files or []),
        )
        self._store_message(message)
        await self._emit(MessagePosted(message=message.model_copy(deep=True)))
        return message

    async def _edit_message(
        self,
        message: Message,
        text: str | None,
        blocks: list[JsonDict] | None,
        source: EditSource,
    ) -> None:
        message.edits.append(
            MessageVersion(
                text=message.text,
                blocks=message.blocks,
                at=message.edited_at or message.posted_at,
                source=message.edited_by or "posted",
            )
        )
        if text is not None:
            message.text = text
        if blocks is not None:
            message.blocks = blocks
        message.edited_at = time.time()
        message.edited_by = source
        await self._emit(MessageEdited(message=message.model_copy(deep=True)))

    async def _post_ephemeral(
        self,
        channel: str,
        user: str,
        text: str | None,
        blocks: list[JsonDict] | None,
        thread_ts: str | None,
        source: EphemeralSource,
    ) -> Ephemeral:
        ephemeral = Ephemeral(
            channel=channel,
            user=user,
            text=text or "",
            blocks=blocks,
            thread_ts=thread_ts,
            ts=self._next_ts(),
            at=time.time(),
            source=source,
        )
        self.ephemerals.append(ephemeral)
        await self._emit(EphemeralPosted(ephemeral=ephemeral.model_copy(deep=True)))
        return ephemeral

    # -- Web API methods ---------------------------------------------------------------------

    async def _auth_test(self, args: JsonDict) -> JsonDict:
        return {
            "ok": True,
            "url": f"{self.base_url}/",
            "team": self.team_domain,
            "user": "gpuops",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": self.org_install,
            **({"enterprise_id": "E0GPUOPS"} if self.org_install else {}),
        }

    async def _apps_connections_open(self, args: JsonDict) -> JsonDict:
        return {"ok": True, "url": self.socket_mode.new_url()}

    async def _chat_post_message(self, args: JsonDict) -> JsonDict:
        channel = self._postable_channel(args.get("channel"))
        if channel in self.dms and not self.messages_tab_enabled:
            raise ApiError("messages_tab_disabled")
        text, blocks = self._content(args)
        text, truncation = truncated_text(text)
        thread_ts = _optional_str(args.get("thread_ts"))
        message = await self._post_bot_message(channel, text, blocks, thread_ts, "chat.postMessage")
        return {
            "ok": True,
            "channel": channel,
            "ts": message.ts,
            "message": message.as_slack(self.team_id),
            **truncation,
        }

    async def _chat_update(self, args: JsonDict) -> JsonDict:
        channel = self._channel_id(args.get("channel"))
        message = self.message(channel, str(args.get("ts", "")))
        if message is None or message.deleted:
            raise ApiError("message_not_found")
        if message.user != self.bot_user_id:
            raise ApiError("cant_update_message")
        text, blocks = self._content(args)
        text, truncation = truncated_text(text)
        await self._edit_message(message, text, blocks, "chat.update")
        return {
            "ok": True,
            "channel": channel,
            "ts": message.ts,
            "text": message.text,
            "message": message.as_slack(self.team_id),
            **truncation,
        }

    async def _chat_post_ephemeral(self, args: JsonDict) -> JsonDict:
        channel = self._postable_channel(args.get("channel"))
        user = _optional_str(args.get("user"))
        if user is None:
            raise ApiError("user_not_found")
        if self.users and user not in self.users:
            raise ApiError("user_not_in_channel")
        text, blocks = self._content(args)
        text, truncation = truncated_text(text)
        thread_ts = _optional_str(args.get("thread_ts"))
        ephemeral = await self._post_ephemeral(
            channel, user, text, blocks, thread_ts, "chat.postEphemeral"
        )
        return {"ok": True, "message_ts": ephemeral.ts, **truncation}

    async def _chat_get_permalink(self, args: JsonDict) -> JsonDict:
        channel = self._channel_id(args.get("channel"))
        message = self.message(channel, str(args.get("message_ts", "")))
        if message is None:
            raise ApiError("message_not_found")
        permalink = f"{self.base_url}/archives/{channel}/p{message.ts.replace('.', '')}"
        if message.is_reply:
            permalink += f"?thread_ts={message.thread_ts}&cid={channel}"
        return {"ok": True, "channel": channel, "permalink": permalink}

    async def _views_open(self, args: JsonDict) -> JsonDict:
        user = self._exchange_trigger(args.get("trigger_id"))
        view = self._new_view(user, args.get("view"), previous_view_id=None, root_view_id=None)
        for old_id in list(self._view_stacks.get(user, [])):
            await self.close_view(old_id, reason="replaced")
        self._view_stacks[user] = [view.id]
        await self._emit(ViewOpened(view=view.model_copy(deep=True)))
        return {"ok": True, "view": view.as_slack()}

    async def _views_push(self, args: JsonDict) -> JsonDict:
        user = self._exchange_trigger(args.get("trigger_id"))
        stack = self._view_stacks.get(user, [])
        if not stack:
            raise ApiError("not_found")
        if len(stack) >= VIEW_STACK_LIMIT:
            raise ApiError("push_limit_reached")
        view = await self.push_view(user, args.get("view"))
        return {"ok": True, "view": view.as_slack()}

    async def _views_update(self, args: JsonDict) -> JsonDict:
        view = self._find_view(args)
        expected_hash = _optional_str(args.get("hash"))
        if expected_hash is not None and expected_hash != view.hash:
            raise ApiError("hash_conflict")
        await self.replace_view(view.id, args.get("view"))
        return {"ok": True, "view": view.as_slack()}

    async def _views_publish(self, args: JsonDict) -> JsonDict:
        user = str(args.get("user_id", ""))
        if not user or (self.users and user not in self.users):
            raise ApiError("user_not_found")
        definition = args.get("view")
        problems = view_problems(definition, kind="home")
        if problems or not isinstance(definition, dict):
            raise ApiError(
                "invalid_arguments",
                response_metadata={"messages": [f"[ERROR] {p}" for p in problems]},
            )
        current = self.homes.get(user)
        expected_hash = _optional_str(args.get("hash"))
        if current is not None and expected_hash is not None and expected_hash != current.hash:
            raise ApiError("hash_conflict")
        view_id = current.id if current is not None else random_id("V")
        stored = {
            **definition,
            "id": view_id,
            "team_id": self.team_id,
            "blocks": fill_block_ids(definition["blocks"]),
            "private_metadata": str(definition.get("private_metadata", "")),
            "callback_id": str(definition.get("callback_id", "")),
            "external_id": str(definition.get("external_id", "")),
            "hash": f"{int(time.time())}.{secrets.token_hex(4)}",
            "app_id": self.app_id,
            "bot_id": self.bot_id,
        }
        home = View(id=view_id, user=user, view=stored)
        if current is not None:
            home.history = [*current.history, current.view]
        self.homes[user] = home
        await self._emit(HomePublished(view=home.model_copy(deep=True)))
        return {"ok": True, "view": home.as_slack()}

    def home_of(self, user: str) -> View | None:
        """The App Home tab last published for ``user``."""
        return self.homes.get(user)

    async def _usergroups_users_list(self, args: JsonDict) -> JsonDict:
        group = str(args.get("usergroup", ""))
        if self.org_install and not args.get("team_id"):
            raise ApiError("missing_argument")
        if group not in self.usergroups:
            raise ApiError("no_such_subteam")
        return {"ok": True, "users": list(self.usergroups[group])}

    async def _users_info(self, args: JsonDict) -> JsonDict:
        user = str(args.get("user", ""))
        if user == self.bot_user_id:
            return {"ok": True, "user": self._user_object(user, "gpuops", is_bot=True)}
        if user not in self.users:
            raise ApiError("user_not_found")
        return {"ok": True, "user": self._user_object(user, self.users[user], is_bot=False)}

    async def _users_lookup_by_email(self, args: JsonDict) -> JsonDict:
        email = str(args.get("email", "")).strip()
        if not email:
            raise ApiError("invalid_arguments")
        user = next((u for u, e in self.emails.items() if e.lower() == email.lower()), None)
        if user is None or user not in self.users:
            raise ApiError("users_not_found")
        found = self._user_object(user, self.users[user], is_bot=False)
        found["profile"]["email"] = self.emails[user]
        return {"ok": True, "user": found}

    def _user_object(self, user: str, display_name: str, *, is_bot: bool) -> JsonDict:
        handle = display_name.lower().replace(" ", ".")
        return {
            "id": user,
            "team_id": self.team_id,
            "name": handle,
            "real_name": display_name,
            "deleted": False,
            "is_bot": is_bot,
            "is_admin": False,
            "tz": "UTC",
            "profile": {
                "display_name": display_name,
                "real_name": display_name,
                "team": self.team_id,
                **({"bot_id": self.bot_id} if is_bot else {}),
            },
        }

    async def _conversations_open(self, args: JsonDict) -> JsonDict:
        users = [u.strip() for u in str(args.get("users", "")).split(",") if u.strip()]
        if len(users) != 1:
            raise ApiError("not_enough_users" if not users else "method_not_supported_for_mpim")
        if users[0] not in self.users:
            raise ApiError("user_not_found")
        return {"ok": True, "channel": {"id": self.open_dm(users[0])}}

    async def _conversations_info(self, args: JsonDict) -> JsonDict:
        channel = self._channel_id(args.get("channel"))
        if channel.startswith("D") and channel in self.dms:
            self._require_scope("im:read")
            return {
                "ok": True,
                "channel": {"id": channel, "is_im": True, "user": "U" + channel[1:]},
            }
        if channel not in self.channels and channel not in self.not_member_channels:
            raise ApiError("channel_not_found")
        self._require_scope("channels:read")  # the stand-in's channels are all public
        return {
            "ok": True,
            "channel": {
                "id": channel,
                "name": self.channel_name(channel),
                "is_channel": True,
                "is_private": False,
                "is_im": False,
                "is_archived": False,
                "is_member": channel in self.channels,
                "context_team_id": self.team_id,
            },
        }

    async def _conversations_members(self, args: JsonDict) -> JsonDict:
        channel = self._channel_id(args.get("channel"))
        if channel not in self.channels and channel not in self.not_member_channels:
            raise ApiError("channel_not_found")
        self._require_scope("channels:read")
        bot = [self.bot_user_id] if channel in self.channels else []
        return {
            "ok": True,
            "members": [*bot, *self.users],
            "response_metadata": {"next_cursor": ""},
        }

    # -- files (bot.local.slack.files) --------------------------------------------------

    @property
    def files(self) -> dict[str, UploadedFile]:
        """Every file by id, from its upload ticket on (``content`` once uploaded)."""
        return self.uploads.files

    async def _files_get_upload_url(self, args: JsonDict) -> JsonDict:
        try:
            return {"ok": True, **self.uploads.ticket(args)}
        except UploadRefused as exc:
            raise _api_error(exc) from None

    def _share_targets(self, args: JsonDict) -> list[str]:
        """Where ``files.completeUploadExternal`` shares: ``channel_id`` (an unknown one is
        ``channel_not_found``) and ``channels``, a comma-separated list of channel or user
        ids (at most 100, else ``channels_limit_exceeded``; an unknown one is
        ``invalid_channel``). Neither: the file stays private."""
        targets: list[str] = []
        raw_channel = _optional_str(args.get("channel_id"))
        if raw_channel is not None:
            targets.append(self._postable_channel(raw_channel))
        listed = [c.strip() for c in str(args.get("channels") or "").split(",") if c.strip()]
        if len(listed) > 100:
            raise ApiError("channels_limit_exceeded")
        for raw in listed:
            try:
                channel = self._postable_channel(raw)
            except ApiError as exc:
                if exc.error != "channel_not_found":
                    raise
                raise ApiError("invalid_channel") from None
            if channel not in targets:
                targets.append(channel)
        return targets

    def _note_share_thread(self, targets: list[str], thread_ts: str | None) -> None:
        """Slack documents ``thread_ts`` here with "provide only one channel"; it documents
        no error, so a misuse is noted, not refused."""
        if thread_ts is None:
            return
        if not targets:
            self.spec_problems.append(f"thread_ts {thread_ts} without a channel to share in")
        elif len(targets) > 1:
            self.spec_problems.append(f"thread_ts {thread_ts} with {len(targets)} channels")

    def _note_short_uploads(self, files: list[UploadedFile]) -> None:
        """``length`` is "the size in bytes of the file being uploaded"; Slack documents no
        error for fewer bytes, so a short upload is noted, not refused."""
        for file in files:
            got = len(file.content or b"")
            if got < file.length:
                self.spec_problems.append(
                    f"file {file.id} got {got} of the {file.length} bytes announced"
                )

    async def _files_complete_upload(self, args: JsonDict) -> JsonDict:
        targets = self._share_targets(args)
        thread_ts = _optional_str(args.get("thread_ts"))
        try:
            shared = self.uploads.complete(args)
        except UploadRefused as exc:
            raise _api_error(exc) from None
        self._note_share_thread(targets, thread_ts)
        self._note_short_uploads(shared)
        text = str(args.get("initial_comment") or "")
        if targets:
            self._note_bare_user_ids(text)
            for file in shared:
                file.channel, file.thread_ts = targets[0], thread_ts
        for channel in targets:
            await self._post_bot_message(
                channel,
                text,
                None,
                thread_ts,
                "files.completeUploadExternal",
                files=[f.as_slack() for f in shared],
            )
        return {"ok": True, "files": [{"id": f.id, "title": f.title or f.filename} for f in shared]}

    # -- views ----------------------------------------------------------------------------

    def _exchange_trigger(self, raw: Any) -> str:
        trigger = self._triggers.get(str(raw or ""))
        if trigger is None:
            raise ApiError("invalid_trigger_id")
        if trigger.used:
            raise ApiError("exchanged_trigger_id")
        if time.monotonic() - trigger.issued_at > self.trigger_ttl:
            raise ApiError("expired_trigger_id")
        trigger.used = True
        return trigger.user

    def _find_view(self, args: JsonDict) -> View:
        view_id, external_id = _optional_str(args.get("view_id")), args.get("external_id")
        if view_id is not None and view_id in self.views:
            return self.views[view_id]
        if view_id is None and external_id:
            match = next((v for v in self.views.values() if v.external_id == external_id), None)
            if match is not None:
                return match
        raise ApiError("not_found")

    def _materialize(
        self,
        definition: Any,
        *,
        view_id: str,
        previous_view_id: str | None,
        root_view_id: str | None,
    ) -> JsonDict:
        """The stored form of a modal definition, as Slack answers it (without state)."""
        problems = view_problems(definition)
        if problems:
            raise ApiError(
                "invalid_arguments",
                response_metadata={"messages": [f"[ERROR] {p}" for p in problems]},
            )
        external_id = str(definition.get("external_id", ""))
        if external_id and any(
            v.external_id == external_id and v.id != view_id for v in self.views.values()
        ):
            raise ApiError("duplicate_external_id")
        return {
            **definition,
            "id": view_id,
            "team_id": self.team_id,
            "type": "modal",
            "blocks": fill_block_ids(definition["blocks"]),
            "private_metadata": str(definition.get("private_metadata", "")),
            "callback_id": str(definition.get("callback_id", "")),
            "external_id": external_id,
            "hash": f"{int(time.time())}.{secrets.token_hex(4)}",
            "clear_on_close": bool(definition.get("clear_on_close", False)),
            "notify_on_close": bool(definition.get("notify_on_close", False)),
            "previous_view_id": previous_view_id,
            "root_view_id": root_view_id or view_id,
            "app_id": self.app_id,
            "app_installed_team_id": self.team_id,
            "bot_id": self.bot_id,
        }

    def _new_view(
        self,
        user: str,
        definition: Any,
        *,
        previous_view_id: str | None,
        root_view_id: str | None,
    ) -> View:
        view_id = random_id("V")
        stored = self._materialize(
            definition,
            view_id=view_id,
            previous_view_id=previous_view_id,
            root_view_id=root_view_id,
        )
        view = View(id=view_id, user=user, view=stored)
        self.views[view_id] = view
        return view

    async def push_view(self, user: str, definition: Any) -> View:
        """Put a modal on top of the user's stack (``views.push`` / ``response_action``
        push); raises ApiError when the definition is invalid."""
        stack = self._view_stacks.setdefault(user, [])
        view = self._new_view(
            user,
            definition,
            previous_view_id=stack[-1] if stack else None,
            root_view_id=stack[0] if stack else None,
        )
        stack.append(view.id)
        await self._emit(ViewOpened(view=view.model_copy(deep=True)))
        return view

    async def replace_view(self, view_id: str, definition: Any) -> View:
        """Replace a modal's definition (``views.update`` / ``response_action`` update),
        keeping what the user entered in inputs that are still there."""
        view = self.views[view_id]
        stored = self._materialize(
            definition,
            view_id=view.id,
            previous_view_id=view.view.get("previous_view_id"),
            root_view_id=view.view.get("root_view_id"),
        )
        view.history.append(view.view)
        view.view = stored
        view.entered = _entries_still_present(view.entered, stored["blocks"])
        view.errors = None
        await self._emit(ViewUpdated(view=view.model_copy(deep=True)))
        return view

    def enter_values(self, view_id: str, entries: Mapping[str, Mapping[str, JsonDict]]) -> None:
        """Record what the user set in a modal's inputs (block_id → action_id → entry)."""
        view = self.views[view_id]
        for block_id, by_action in entries.items():
            view.entered.setdefault(block_id, {}).update(by_action)
        self._notify()

    async def show_view_errors(self, view_id: str, errors: dict[str, str]) -> None:
        view = self.views[view_id]
        view.errors = dict(errors)
        await self._emit(ViewUpdated(view=view.model_copy(deep=True)))

    async def close_view(self, view_id: str, *, reason: str) -> None:
        """Close a modal and every modal pushed over it."""
        view = self.views[view_id]
        stack = self._view_stacks.get(view.user, [])
        closing = stack[stack.index(view_id) :] if view_id in stack else [view_id]
        for closed_id in reversed(closing):
            if closed_id in stack:
                stack.remove(closed_id)
            closed = self.views[closed_id]
            if closed.open:
                closed.open, closed.closed_reason = False, reason
                await self._emit(ViewClosed(view=closed.model_copy(deep=True)))

    async def apply_view_response(self, view_id: str, status: int, answer: Any) -> list[str]:
        """Do what Slack does with the app's answer to a ``view_submission``; returns what
        Slack would refuse in it (an empty list when all is well)."""
        view = self.views[view_id]
        if status != 200:
            return [f"the app answered HTTP {status}: Slack shows an error and keeps the modal"]
        if not answer:
            await self.close_view(view_id, reason="submitted")
            return []
        if not isinstance(answer, dict):
            return ["the app's answer is not a JSON object"]
        action = answer.get("response_action")
        try:
            return await self._apply_response_action(view, action, answer)
        except ApiError as exc:
            messages = exc.extra.get("response_metadata", {}).get("messages", [exc.error])
            return [f"response_action {action}: {m}" for m in messages]

    async def _apply_response_action(self, view: View, action: Any, answer: JsonDict) -> list[str]:
        if action == "errors":
            errors = answer.get("errors")
            if not isinstance(errors, dict) or not errors:
                return ["response_action errors needs a non-empty errors object"]
            input_ids = {b.get("block_id") for b in view.blocks if b.get("type") == "input"}
            unknown = sorted(k for k in errors if k not in input_ids)
            await self.show_view_errors(view.id, {k: str(v) for k, v in errors.items()})
            return [f"errors key {k!r} is not an input block_id of the view" for k in unknown]
        if action == "update":
            await self.replace_view(view.id, answer.get("view"))
            return []
        if action == "push":
            if len(self._view_stacks.get(view.user, [])) >= VIEW_STACK_LIMIT:
                return ["response_action push: push_limit_reached"]
            await self.push_view(view.user, answer.get("view"))
            return []
        if action == "clear":
            root = self._view_stacks.get(view.user, [view.id])[0]
            await self.close_view(root, reason="cleared")
            return []
        return [f"unknown response_action {action!r}"]

    # -- response URLs ------------------------------------------------------------------------

    async def _response_url(self, request: web.Request) -> web.Response:
        target = self._response_targets.get(request.match_info["token"])
        if target is None:
            return web.Response(status=404, text="no_service")
        if time.monotonic() - target.created_at > RESPONSE_URL_TTL_SECONDS:
            return web.Response(status=404, text="expired_url")
        if target.uses >= RESPONSE_URL_MAX_USES:
            return web.Response(status=404, text="used_url")
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return web.Response(status=400, text="invalid_payload")
        body = _decode_json_fields(body)
        blocks = body.get("blocks")
        if blocks is not None and block_problems(blocks):
            return web.Response(status=400, text="invalid_blocks")
        if fallback_problems(body.get("text"), blocks):
            return web.Response(status=400, text="no_text")
        self._note_bare_user_ids(str(body.get("text") or ""))
        target.uses += 1
        post = ResponsePost(
            channel=target.channel,
            user=target.user,
            message_ts=target.message_ts,
            response_type=_optional_str(body.get("response_type")),
            replace_original=_flag(body.get("replace_original")),
            delete_original=_flag(body.get("delete_original")),
            text=str(body.get("text") or ""),
            blocks=fill_block_ids(blocks) if blocks is not None else None,
            thread_ts=_optional_str(body.get("thread_ts")),
            at=time.time(),
        )
        self.response_posts.append(post)
        await self._apply_response_post(post)
        return web.Response(text="ok")

    async def _apply_response_post(self, post: ResponsePost) -> None:
        original = self.message(post.channel, post.message_ts) if post.message_ts else None
        if original is not None and not original.deleted:
            if post.delete_original:
                original.deleted = True
                await self._emit(MessageDeleted(message=original.model_copy(deep=True)))
                return
            if post.replace_original:
                await self._edit_message(original, post.text, post.blocks, "response_url")
                return
        if post.delete_original:
            return
        if post.response_type == "in_channel":
            await self._post_bot_message(
                post.channel, post.text, post.blocks, post.thread_ts, "response_url"
            )
        else:
            await self._post_ephemeral(
                post.channel, post.user, post.text, post.blocks, post.thread_ts, "response_url"
            )

    # -- control endpoints ----------------------------------------------------------------

    async def _control_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return _json_response(200, {"ok": True})

    async def _control_calls(self, request: web.Request) -> web.Response:
        method = request.query.get("method")
        calls = self.calls if method is None else self.calls_to(method)
        return _json_response(200, [c.model_dump() for c in calls])

    async def _control_add_fault(self, request: web.Request) -> web.Response:
        self._faults.append(SlackFault.model_validate(await request.json()))
        return _json_response(200, {"ok": True})

    async def _control_clear_faults(self, request: web.Request) -> web.Response:
        self.clear_faults()
        return _json_response(200, {"ok": True})


def _api_error(refused: UploadRefused) -> ApiError:
    if not refused.messages:
        return ApiError(refused.error)
    return ApiError(refused.error, response_metadata={"messages": refused.messages})


def _channel_names(channels: Mapping[str, str] | Iterable[str] | None) -> dict[str, str]:
    if channels is None:
        return {}
    if isinstance(channels, Mapping):
        return dict(channels)
    return {channel: channel for channel in channels}


def _entries_still_present(
    entered: dict[str, dict[str, JsonDict]], blocks: list[JsonDict]
) -> dict[str, dict[str, JsonDict]]:
    """Slack keeps a user's entry across ``views.update`` when the same block_id and
    action_id (with the same element type) are still in the view."""
    kept: dict[str, dict[str, JsonDict]] = {}
    for block_id, element in stateful_elements(blocks):
        action_id = str(element.get("action_id", ""))
        entry = entered.get(block_id, {}).get(action_id)
        if entry is not None and entry.get("type") == element.get("type"):
            kept.setdefault(block_id, {})[action_id] = entry
    return kept
