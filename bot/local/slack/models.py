"""What the local Slack stand-in records, what it tells subscribers, and the Block Kit rules
it shares between the fake Web API (which stores views and messages) and the sender (which
fills in and submits modals as a Slack client would).

Everything here is plain data plus pure functions: no I/O.
"""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field
from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View as SdkView

JsonDict = dict[str, Any]
InputValue = str | int | list[str] | None
"""What a user types into one input: text, a number, an option value (or values), or
nothing (cleared)."""

MessageSource = Literal["chat.postMessage", "response_url", "user", "files.completeUploadExternal"]
EditSource = Literal["posted", "chat.update", "response_url"]
EphemeralSource = Literal["chat.postEphemeral", "response_url"]


# -- recorded state ------------------------------------------------------------------------


class SlackCall(BaseModel):
    """One Web API call the bot made (the token is never kept)."""

    method: str
    args: JsonDict
    at: float
    http_method: str = "POST"
    status: int = 200
    ok: bool = True
    error: str | None = None


class MessageVersion(BaseModel):
    """A message's content as it was at one point: first posted, then after each edit."""

    text: str
    blocks: list[JsonDict] | None = None
    at: float
    source: EditSource


class Message(BaseModel):
    channel: str
    ts: str
    thread_ts: str | None = None
    text: str = ""
    blocks: list[JsonDict] | None = None
    user: str
    bot_id: str | None = None
    source: MessageSource
    posted_at: float
    edits: list[MessageVersion] = Field(default_factory=list)
    """The versions replaced by edits, oldest first: ``edits[0]`` is the message as first
    posted. The current content is ``text`` / ``blocks``."""
    edited_at: float | None = None
    edited_by: EditSource | None = None
    deleted: bool = False
    reply_count: int = 0
    latest_reply: str | None = None
    files: list[JsonDict] = Field(default_factory=list)
    """Files shared with the message (``files.completeUploadExternal``): Slack's file
    objects; their bytes are in ``FakeSlack.files``."""

    @property
    def is_reply(self) -> bool:
        return self.thread_ts is not None and self.thread_ts != self.ts

    @property
    def versions(self) -> list[MessageVersion]:
        """Every version, oldest first, the current one last."""
        current = MessageVersion(
            text=self.text,
            blocks=self.blocks,
            at=self.edited_at or self.posted_at,
            source=self.edited_by or "posted",
        )
        return [*self.edits, current]

    def as_slack(self, team_id: str) -> JsonDict:
        """The message as Slack shows it in API answers and interaction payloads."""
        shown: JsonDict = {"type": "message", "ts": self.ts, "text": self.text, "team": team_id}
        shown["user"] = self.user
        if self.bot_id is not None:
            shown["bot_id"] = self.bot_id
        if self.blocks is not None:
            shown["blocks"] = self.blocks
        if self.is_reply:
            shown["thread_ts"] = self.thread_ts
        if self.reply_count:
            shown["thread_ts"] = self.ts
            shown["reply_count"] = self.reply_count
            shown["latest_reply"] = self.latest_reply
        if self.edits:
            shown["edited"] = {"user": self.user, "ts": self.ts}
        if self.files:
            shown["files"] = self.files
        return shown


class Ephemeral(BaseModel):
    """A message only ``user`` sees in ``channel``."""

    channel: str
    user: str
    text: str = ""
    blocks: list[JsonDict] | None = None
    thread_ts: str | None = None
    ts: str
    at: float
    source: EphemeralSource


class ResponsePost(BaseModel):
    """One POST the bot made to a ``response_url`` (what ``respond()`` sends)."""

    channel: str
    user: str
    message_ts: str | None
    response_type: str | None = None
    replace_original: bool = False
    delete_original: bool = False
    text: str = ""
    blocks: list[JsonDict] | None = None
    thread_ts: str | None = None
    at: float


class View(BaseModel):
    """A modal as the fake stores it: ``view`` is what Slack answers in ``views.*`` (with the
    generated id, hash, …); the user's entries live in ``entered`` until submitted."""

    id: str
    user: str
    view: JsonDict
    history: list[JsonDict] = Field(default_factory=list)
    """Earlier versions of ``view``, oldest first."""
    open: bool = True
    closed_reason: str | None = None
    entered: dict[str, dict[str, JsonDict]] = Field(default_factory=dict)
    """block_id → action_id → state entry the user has set (untouched inputs are absent)."""
    errors: dict[str, str] | None = None
    """The last ``response_action: errors`` the app answered, shown under the inputs."""

    @property
    def callback_id(self) -> str:
        return str(self.view.get("callback_id", ""))

    @property
    def private_metadata(self) -> str:
        return str(self.view.get("private_metadata", ""))

    @property
    def hash(self) -> str:
        return str(self.view.get("hash", ""))

    @property
    def external_id(self) -> str:
        return str(self.view.get("external_id", ""))

    @property
    def blocks(self) -> list[JsonDict]:
        blocks = self.view.get("blocks", [])
        return blocks if isinstance(blocks, list) else []

    def state_values(self) -> dict[str, dict[str, JsonDict]]:
        return state_values(self.blocks, self.entered)

    def as_slack(self) -> JsonDict:
        """The view with ``state.values`` filled from the initial values and the entries."""
        return {**self.view, "state": {"values": self.state_values()}}


# -- events for subscribers ------------------------------------------------------------------


class MessagePosted(BaseModel):
    kind: Literal["message_posted"] = "message_posted"
    message: Message


class MessageEdited(BaseModel):
    kind: Literal["message_edited"] = "message_edited"
    message: Message


class MessageDeleted(BaseModel):
    kind: Literal["message_deleted"] = "message_deleted"
    message: Message


class EphemeralPosted(BaseModel):
    kind: Literal["ephemeral_posted"] = "ephemeral_posted"
    ephemeral: Ephemeral


class ViewOpened(BaseModel):
    """``views.open``, ``views.push`` or ``response_action: push``."""

    kind: Literal["view_opened"] = "view_opened"
    view: View


class ViewUpdated(BaseModel):
    """``views.update``, ``response_action: update`` or ``response_action: errors`` (then
    ``view.errors`` holds the messages)."""

    kind: Literal["view_updated"] = "view_updated"
    view: View


class HomePublished(BaseModel):
    """``views.publish``: a person's App Home tab, first shown or replaced."""

    kind: Literal["home_published"] = "home_published"
    view: View


class ViewClosed(BaseModel):
    kind: Literal["view_closed"] = "view_closed"
    view: View


class ErrorShown(BaseModel):
    """What Slack's client showed a person instead of the app's answer (the app answered
    late or with an error): ``where`` is ``command``, ``block_actions``, ``view_submission``
    or ``event`` (events are retried, nobody sees them fail)."""

    kind: Literal["error_shown"] = "error_shown"
    user: str
    channel: str | None
    where: str
    text: str
    at: float


class UserActed(BaseModel):
    """What a user did through the sender, as a line to show: ``/gpu show p c``,
    ``[clicked Approve]``, ``[submitted Update cluster]``. Not a channel message."""

    kind: Literal["user_acted"] = "user_acted"
    user: str
    channel: str | None
    text: str
    thread_ts: str | None = None
    at: float


class FunctionCompleted(BaseModel):
    """A workflow step of the app was completed (``functions.completeSuccess`` with its
    ``outputs``, or ``functions.completeError`` with its ``error``)."""

    kind: Literal["function_completed"] = "function_completed"
    execution_id: str
    callback_id: str
    success: bool
    outputs: dict[str, Any] | None = None
    error: str | None = None
    at: float


FakeEvent = Annotated[
    MessagePosted
    | MessageEdited
    | MessageDeleted
    | EphemeralPosted
    | ViewOpened
    | ViewUpdated
    | ViewClosed
    | ErrorShown
    | HomePublished
    | UserActed
    | FunctionCompleted,
    Field(discriminator="kind"),
]


# -- ids ---------------------------------------------------------------------------------------

_ID_ALPHABET = string.ascii_uppercase + string.digits


def random_id(prefix: str, length: int = 10) -> str:
    return prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(length))


# -- Block Kit: element state --------------------------------------------------------------

_TEXT_ELEMENTS = {"plain_text_input", "email_text_input", "url_text_input", "number_input"}
_SINGLE_OPTION_ELEMENTS = {"static_select", "radio_buttons"}
_MULTI_OPTION_ELEMENTS = {"multi_static_select", "checkboxes"}
# element type → (state key, initial key)
_PICKED_ELEMENTS: dict[str, tuple[str, str]] = {
    "datetimepicker": ("selected_date_time", "initial_date_time"),
    "datepicker": ("selected_date", "initial_date"),
    "timepicker": ("selected_time", "initial_time"),
    "users_select": ("selected_user", "initial_user"),
    "conversations_select": ("selected_conversation", "initial_conversation"),
    "channels_select": ("selected_channel", "initial_channel"),
    "multi_users_select": ("selected_users", "initial_users"),
    "multi_conversations_select": ("selected_conversations", "initial_conversations"),
    "multi_channels_select": ("selected_channels", "initial_channels"),
}
STATEFUL_ELEMENTS = frozenset(
    _TEXT_ELEMENTS | _SINGLE_OPTION_ELEMENTS | _MULTI_OPTION_ELEMENTS | set(_PICKED_ELEMENTS)
)


class BlockInputError(ValueError):
    """A value Slack's own client would not let the user enter or submit."""


def block_elements(block: Mapping[str, Any]) -> list[JsonDict]:
    """The interactive elements of one block (input element, actions elements, accessory)."""
    kind = block.get("type")
    if kind == "input" and isinstance(block.get("element"), dict):
        return [block["element"]]
    if kind == "actions" and isinstance(block.get("elements"), list):
        return [e for e in block["elements"] if isinstance(e, dict)]
    if kind == "section" and isinstance(block.get("accessory"), dict):
        return [block["accessory"]]
    return []


def stateful_elements(blocks: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, JsonDict]]:
    """(block_id, element) for every element whose value appears in ``state.values``."""
    for block in blocks:
        for element in block_elements(block):
            if element.get("type") in STATEFUL_ELEMENTS:
                yield str(block.get("block_id", "")), element


def find_block(blocks: Sequence[Mapping[str, Any]], block_id: str) -> Mapping[str, Any] | None:
    return next((b for b in blocks if b.get("block_id") == block_id), None)


def element_options(element: Mapping[str, Any]) -> list[JsonDict]:
    options = [o for o in element.get("options") or [] if isinstance(o, dict)]
    for group in element.get("option_groups") or []:
        options.extend(o for o in group.get("options") or [] if isinstance(o, dict))
    return options


def initial_entry(element: Mapping[str, Any]) -> JsonDict:
    """The state entry of an element the user has not touched."""
    kind = str(element.get("type"))
    if kind in _TEXT_ELEMENTS:
        initial = element.get("initial_value")
        return {"type": kind, "value": None if initial in (None, "") else str(initial)}
    if kind in _SINGLE_OPTION_ELEMENTS:
        return {"type": kind, "selected_option": element.get("initial_option")}
    if kind in _MULTI_OPTION_ELEMENTS:
        return {"type": kind, "selected_options": list(element.get("initial_options") or [])}
    state_key, initial_key = _PICKED_ELEMENTS[kind]
    initial = element.get(initial_key)
    if initial is None and kind.startswith("multi_"):
        initial = []
    return {"type": kind, state_key: initial}


def state_values(
    blocks: Sequence[Mapping[str, Any]], entered: Mapping[str, Mapping[str, JsonDict]]
) -> dict[str, dict[str, JsonDict]]:
    """``view.state.values``: the user's entries over the elements' initial values."""
    values: dict[str, dict[str, JsonDict]] = {}
    for block_id, element in stateful_elements(blocks):
        action_id = str(element.get("action_id", ""))
        entry = entered.get(block_id, {}).get(action_id) or initial_entry(element)
        values.setdefault(block_id, {})[action_id] = entry
    return values


def entry_from_input(element: Mapping[str, Any], value: InputValue) -> JsonDict:
    """The state entry after the user sets ``value`` in ``element``; raises BlockInputError
    for what Slack's client refuses (an option not on the list, text in a number input…)."""
    kind = str(element.get("type"))
    if kind in _TEXT_ELEMENTS:
        return {"type": kind, "value": _text_value(element, value)}
    if kind in _SINGLE_OPTION_ELEMENTS:
        return {"type": kind, "selected_option": _pick_options(element, value, many=False)[0]}
    if kind in _MULTI_OPTION_ELEMENTS:
        return {"type": kind, "selected_options": _pick_options(element, value, many=True)}
    state_key, _ = _PICKED_ELEMENTS[kind]
    return {"type": kind, state_key: _picked_value(kind, value)}


def _as_list(value: InputValue) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]


def _text_value(element: Mapping[str, Any], value: InputValue) -> str | None:
    if isinstance(value, list):
        value = ",".join(value)
    text = None if value is None or str(value) == "" else str(value)
    if text is None:
        return None
    if element.get("type") == "number_input":
        _check_number(element, text)
    max_length = element.get("max_length")
    if isinstance(max_length, int) and len(text) > max_length:
        raise BlockInputError(f"at most {max_length} characters")
    min_length = element.get("min_length")
    if isinstance(min_length, int) and len(text) < min_length:
        raise BlockInputError(f"at least {min_length} characters")
    return text


def _check_number(element: Mapping[str, Any], text: str) -> None:
    decimals = bool(element.get("is_decimal_allowed"))
    pattern = r"-?\d+(\.\d+)?" if decimals else r"-?\d+"
    if not re.fullmatch(pattern, text):
        raise BlockInputError("a number" + ("" if decimals else " without decimals") + " please")
    number = Decimal(text)
    low, high = _bound(element, "min_value"), _bound(element, "max_value")
    if low is not None and number < low:
        raise BlockInputError(f"at least {low} please")
    if high is not None and number > high:
        raise BlockInputError(f"at most {high} please")


def _bound(element: Mapping[str, Any], key: str) -> Decimal | None:
    bound = element.get(key)
    if bound is None:
        return None
    try:
        return Decimal(str(bound))
    except InvalidOperation:
        return None


def _pick_options(element: Mapping[str, Any], value: InputValue, *, many: bool) -> list[Any]:
    wanted = _as_list(value)
    if not wanted:
        return [] if many else [None]
    if not many and len(wanted) > 1:
        raise BlockInputError("pick one option")
    options = element_options(element)
    picked = []
    for item in wanted:
        option = next((o for o in options if str(o.get("value")) == item), None) or next(
            (o for o in options if _option_text(o).casefold() == item.casefold()), None
        )
        if option is None:
            choices = ", ".join(str(o.get("value")) for o in options)
            raise BlockInputError(f"{item!r} is not an option (options: {choices})")
        picked.append(option)
    return picked


def _option_text(option: Mapping[str, Any]) -> str:
    text = option.get("text")
    return str(text.get("text", "")) if isinstance(text, dict) else str(text or "")


def _picked_value(kind: str, value: InputValue) -> Any:
    if kind.startswith("multi_"):
        return _as_list(value)
    if value is None or value == "":
        return None
    text = str(value).strip()
    if kind == "datetimepicker":
        return _epoch_seconds(text)
    if kind == "datepicker":
        try:
            return date.fromisoformat(text).isoformat()
        except ValueError as exc:
            raise BlockInputError("a date as YYYY-MM-DD please") from exc
    if kind == "timepicker":
        try:
            return time.fromisoformat(text).strftime("%H:%M")
        except ValueError as exc:
            raise BlockInputError("a time as HH:MM please") from exc
    return text


def _epoch_seconds(text: str) -> int:
    if re.fullmatch(r"\d+", text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise BlockInputError("a date and time as RFC 3339 or epoch seconds please") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp())


def entry_is_empty(entry: Mapping[str, Any]) -> bool:
    payload = [v for k, v in entry.items() if k != "type"]
    return all(v in (None, "", []) for v in payload)


def missing_required(
    blocks: Sequence[Mapping[str, Any]], values: Mapping[str, Mapping[str, JsonDict]]
) -> dict[str, str]:
    """block_id → message for every required input left empty (Slack's client refuses to
    submit then, without asking the app)."""
    missing: dict[str, str] = {}
    for block in blocks:
        if block.get("type") != "input" or block.get("optional"):
            continue
        block_id = str(block.get("block_id", ""))
        entries = values.get(block_id, {})
        if not entries or all(entry_is_empty(e) for e in entries.values()):
            missing[block_id] = "This field is required."
    return missing


def fill_block_ids(blocks: list[JsonDict]) -> list[JsonDict]:
    """Give every block a block_id and every element an action_id, as Slack does."""
    filled: list[JsonDict] = []
    for block in blocks:
        block = dict(block)
        block.setdefault("block_id", random_id("", 5).lower())
        kind = block.get("type")
        if kind == "input" and isinstance(block.get("element"), dict):
            block["element"] = _with_action_id(block["element"])
        elif kind == "actions" and isinstance(block.get("elements"), list):
            block["elements"] = [_with_action_id(e) for e in block["elements"]]
        elif kind == "section" and isinstance(block.get("accessory"), dict):
            block["accessory"] = _with_action_id(block["accessory"])
        filled.append(block)
    return filled


def _with_action_id(element: Any) -> Any:
    if isinstance(element, dict) and "action_id" not in element:
        return {**element, "action_id": random_id("", 5).lower()}
    return element


# -- Block Kit: the limits Slack enforces ------------------------------------------------------

_BLOCK_TYPES = {
    "section",
    "divider",
    "header",
    "context",
    "actions",
    "input",
    "image",
    "rich_text",
    "file",
    "video",
    "markdown",
}
_MESSAGE_BLOCK_LIMIT = 50
_VIEW_BLOCK_LIMIT = 100


def block_problems(blocks: Any, *, in_view: bool = False) -> list[str]:
    """What Slack would reject in these blocks (``invalid_blocks``), as its error messages
    roughly put it; an empty list when they pass."""
    if not isinstance(blocks, list):
        return ["blocks must be an array"]
    limit = _VIEW_BLOCK_LIMIT if in_view else _MESSAGE_BLOCK_LIMIT
    problems: list[str] = []
    if len(blocks) > limit:
        problems.append(f"no more than {limit} items allowed [json-pointer:/blocks]")
    seen_block_ids: set[str] = set()
    for index, block in enumerate(blocks):
        where = f"[json-pointer:/blocks/{index}]"
        if not isinstance(block, dict) or block.get("type") not in _BLOCK_TYPES:
            problems.append(f"unsupported block type {where}")
            continue
        own = _single_block_problems(block, in_view)
        block_id = block.get("block_id")
        if block_id is not None:
            if len(str(block_id)) > 255:
                own.append("block_id must be at most 255 characters")
            if block_id in seen_block_ids:
                own.append(f"duplicate block_id {block_id!r}")
            seen_block_ids.add(str(block_id))
        # An action_id is unique within its block, not within a message or view (SPEC §4.6).
        seen_action_ids: set[str] = set()
        for element in block_elements(block):
            action_id = element.get("action_id")
            if action_id is not None:
                if action_id in seen_action_ids:
                    own.append(f"duplicate action_id {action_id!r}")
                seen_action_ids.add(str(action_id))
            own.extend(_element_problems(element))
        # slack_sdk's models are the second opinion, for what the rules above do not cover.
        problems.extend(f"{p} {where}" for p in own or sdk_block_problems(block))
    return problems


def _text_problems(text: Any, name: str, max_len: int, *, plain_only: bool = False) -> list[str]:
    if not isinstance(text, dict) or text.get("type") not in ("plain_text", "mrkdwn"):
        return [f"{name} must be a text object"]
    if plain_only and text.get("type") != "plain_text":
        return [f"{name} must be plain_text"]
    body = str(text.get("text", ""))
    if not body:
        return [f"{name} must be more than 0 characters"]
    if len(body) > max_len:
        return [f"{name} must be less than {max_len + 1} characters"]
    return []


def _single_block_problems(block: JsonDict, in_view: bool) -> list[str]:
    kind = block["type"]
    if kind == "section":
        problems = []
        if "text" not in block and "fields" not in block:
            problems.append("section needs text or fields")
        if "text" in block:
            problems += _text_problems(block["text"], "text", 3000)
        fields = block.get("fields") or []
        if len(fields) > 10:
            problems.append("no more than 10 fields allowed")
        for field in fields:
            problems += _text_problems(field, "fields", 2000)
        return problems
    if kind == "header":
        return _text_problems(block.get("text"), "text", 150, plain_only=True)
    if kind == "context":
        elements = block.get("elements") or []
        return ["context needs 1 to 10 elements"] if not 1 <= len(elements) <= 10 else []
    if kind == "actions":
        elements = block.get("elements") or []
        return ["actions needs 1 to 25 elements"] if not 1 <= len(elements) <= 25 else []
    if kind == "input":
        if not in_view:
            return []
        problems = _text_problems(block.get("label"), "label", 2000, plain_only=True)
        if "hint" in block:
            problems += _text_problems(block["hint"], "hint", 2000, plain_only=True)
        if not isinstance(block.get("element"), dict):
            problems.append("input needs an element")
        return problems
    return []


def _element_problems(element: JsonDict) -> list[str]:
    problems = []
    action_id = element.get("action_id")
    if action_id is not None and len(str(action_id)) > 255:
        problems.append("action_id must be at most 255 characters")
    if element.get("type") == "button":
        problems += _text_problems(element.get("text"), "button text", 75, plain_only=True)
        if len(str(element.get("value", ""))) > 2000:
            problems.append("button value must be at most 2000 characters")
    if "placeholder" in element:
        problems += _text_problems(element["placeholder"], "placeholder", 150, plain_only=True)
    if element.get("type") == "plain_text_input":
        problems += _text_input_problems(element)
    options = element_options(element)
    if len(options) > 100:
        problems.append("no more than 100 options allowed")
    for option in options:
        problems += _text_problems(option.get("text"), "option text", 75)
        if len(str(option.get("value", ""))) > 150:
            problems.append("option value must be at most 150 characters")
    return problems + _initial_option_problems(element, options)


_TEXT_INPUT_MAX = 3000


def _text_input_problems(element: JsonDict) -> list[str]:
    """``plain_text_input``: 0 ≤ min_length ≤ 3000, 1 ≤ max_length ≤ 3000, min ≤ max, and an
    initial value within them."""
    problems: list[str] = []
    low, high = element.get("min_length"), element.get("max_length")
    if low is not None and (not isinstance(low, int) or not 0 <= low <= _TEXT_INPUT_MAX):
        problems.append(f"min_length must be between 0 and {_TEXT_INPUT_MAX}")
    if high is not None and (not isinstance(high, int) or not 1 <= high <= _TEXT_INPUT_MAX):
        problems.append(f"max_length must be between 1 and {_TEXT_INPUT_MAX}")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        problems.append("min_length must not be more than max_length")
    initial = element.get("initial_value")
    if isinstance(initial, str) and isinstance(high, int) and len(initial) > high:
        problems.append("initial_value must not be longer than max_length")
    return problems


def _same_option(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return str(a.get("value")) == str(b.get("value")) and _option_text(a) == _option_text(b)


def _initial_option_problems(element: JsonDict, options: list[JsonDict]) -> list[str]:
    """Slack refuses an ``initial_option(s)`` that is not exactly one of the options."""
    if not options:
        return []  # external or conversation selects: nothing to compare with
    initial = [element["initial_option"]] if isinstance(element.get("initial_option"), dict) else []
    initial += [o for o in element.get("initial_options") or [] if isinstance(o, dict)]
    return [
        f"initial option {str(o.get('value'))!r} must be one of the options"
        for o in initial
        if not any(_same_option(o, option) for option in options)
    ]


def sdk_block_problems(block: Mapping[str, Any]) -> list[str]:
    """What slack_sdk's Block Kit models refuse in one block, nested elements included:
    ``validate_json()`` checks only the block's own attributes, ``to_dict()`` also checks
    every element, text object and confirm dialog inside it."""
    try:
        parsed = Block.parse(dict(block))
        if parsed is None:
            return ["slack_sdk does not know this block"]
        parsed.to_dict()
    except (SlackObjectFormationError, TypeError, ValueError, KeyError, AttributeError) as exc:
        return [f"slack_sdk: {exc}"]
    return []


def sdk_view_problems(view: Mapping[str, Any]) -> list[str]:
    """What slack_sdk's ``View`` model refuses in a view definition."""
    try:
        SdkView(**dict(view)).to_dict()
    except (SlackObjectFormationError, TypeError, ValueError, KeyError, AttributeError) as exc:
        return [f"slack_sdk: {exc}"]
    return []


_BARE_USER_ID = re.compile(r"(?<![<@\w])([UW][A-Z0-9]{2,})\b")


def bare_user_ids(text: str, users: Iterable[str]) -> list[str]:
    """Known user ids written bare in a message text (``U01ALICE`` instead of
    ``<@U01ALICE>``): Slack shows them as they are, not as the person's name (SPEC §4.6)."""
    known = set(users)
    return sorted({m for m in _BARE_USER_ID.findall(text) if m in known})


TEXT_LIMIT = 40_000
"""Slack truncates a message ``text`` longer than this and still posts it, with a warning
(api.slack.com/changelog/2018-04-truncating-really-long-messages: chat.postMessage,
chat.postEphemeral, response URLs and every other way to post)."""


def truncated_text(text: str | None) -> tuple[str | None, JsonDict]:
    """The text Slack keeps, and what its answer adds when it cut the text (else nothing)."""
    if text is None or len(text) <= TEXT_LIMIT:
        return text, {}
    warning = (
        "[WARN] Your message was truncated but still posted."
        " The `text` field accepts up to 40,000 characters."
    )
    return text[:TEXT_LIMIT], {
        "response_metadata": {"messages": [warning], "warnings": ["message_truncated"]}
    }


def fallback_problems(text: Any, blocks: Any) -> list[str]:
    """A message with blocks needs a non-empty ``text`` fallback (notifications, screen
    readers and old clients show it)."""
    if blocks and not str(text or "").strip():
        return ["a message with blocks needs a text fallback [json-pointer:/text]"]
    return []


def view_problems(view: Any, *, kind: Literal["modal", "home"] = "modal") -> list[str]:
    """What ``views.open`` / ``views.update`` (modals) or ``views.publish`` (home) would
    reject in a view definition."""
    if not isinstance(view, dict):
        return ["view must be an object"]
    if view.get("type") != kind:
        return [f"the view type must be {kind} here [json-pointer:/view/type]"]
    if kind == "home":
        return _home_problems(view)
    problems = _text_problems(view.get("title"), "title", 24, plain_only=True)
    for button in ("submit", "close"):
        if button in view:
            problems += _text_problems(view[button], button, 24, plain_only=True)
    blocks = view.get("blocks")
    problems += block_problems(blocks, in_view=True)
    has_input = isinstance(blocks, list) and any(
        isinstance(b, dict) and b.get("type") == "input" for b in blocks
    )
    if has_input and "submit" not in view:
        problems.append("submit is required when an input block is within the blocks array")
    if len(str(view.get("private_metadata", ""))) > 3000:
        problems.append("private_metadata must be at most 3000 characters")
    if len(str(view.get("callback_id", ""))) > 255:
        problems.append("callback_id must be at most 255 characters")
    # views.open / views.push / views.update: "Max length of 255 characters".
    if len(str(view.get("external_id", ""))) > 255:
        problems.append("external_id must be at most 255 characters")
    return problems or sdk_view_problems(view)


def _home_problems(view: JsonDict) -> list[str]:
    problems = block_problems(view.get("blocks"), in_view=True)
    if len(str(view.get("private_metadata", ""))) > 3000:
        problems.append("private_metadata must be at most 3000 characters")
    if len(str(view.get("callback_id", ""))) > 255:
        problems.append("callback_id must be at most 255 characters")
    # views.open / views.push / views.update: "Max length of 255 characters".
    if len(str(view.get("external_id", ""))) > 255:
        problems.append("external_id must be at most 255 characters")
    return problems or sdk_view_problems(view)
