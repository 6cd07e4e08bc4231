"""Pydantic models of the parts of Slack payloads that the handlers read.

Slack sends more than this; extra keys are ignored. A payload that does not fit is
answered with a clear message, never an exception escaping the handler.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


Model = TypeVar("Model", bound=_Loose)
# A Slack payload as Bolt hands it to a listener (body, event), before it is parsed.
Payload = dict[str, object]


class SlashCommand(_Loose):
    user_id: str = Field(min_length=1, max_length=64)
    channel_id: str = Field(min_length=1, max_length=64)
    text: str = Field(default="", max_length=4000)
    trigger_id: str | None = None


class _Id(_Loose):
    id: str = Field(min_length=1, max_length=64)


class _Container(_Loose):
    channel_id: str | None = None
    message_ts: str | None = None
    thread_ts: str | None = None


class _Action(_Loose):
    action_id: str
    value: str | None = Field(default=None, max_length=200)
    selected_option: dict[str, Any] | None = None


class _Message(_Loose):
    ts: str | None = None
    thread_ts: str | None = None


class _View(_Loose):
    id: str = ""
    hash: str | None = None
    callback_id: str = ""
    private_metadata: str = Field(default="", max_length=3000)
    state: dict[str, Any] = Field(default_factory=dict)


class BlockAction(_Loose):
    user: _Id
    channel: _Id | None = None
    container: _Container = Field(default_factory=_Container)
    message: _Message | None = None
    actions: list[_Action] = Field(min_length=1)
    trigger_id: str | None = None
    view: _View | None = None

    @property
    def channel_id(self) -> str | None:
        return self.channel.id if self.channel else self.container.channel_id

    @property
    def thread_ts(self) -> str | None:
        if self.message is not None:
            return self.message.thread_ts or self.message.ts
        return self.container.thread_ts or self.container.message_ts


class ViewSubmission(_Loose):
    user: _Id
    view: _View
    trigger_id: str | None = None


class AppMention(_Loose):
    user: str = Field(min_length=1, max_length=64)
    channel: str = Field(min_length=1, max_length=64)
    text: str = Field(default="", max_length=4000)
    ts: str
    thread_ts: str | None = None


STEP_INPUTS = ("project", "cluster_id", "change", "reason", "requester", "channel")


class FunctionExecuted(_Loose):
    """A ``function_executed`` event: a Workflow Builder step of this app starts. Its
    inputs are read by ``step_inputs``: one that does not fit is refused by name (a payload
    that failed to parse would leave the step running with nobody to end it)."""

    function_execution_id: str = Field(min_length=1, max_length=128)
    bot_access_token: str = Field(min_length=1, max_length=512)
    inputs: Any = None

    def step_inputs(self) -> tuple[dict[str, str], tuple[str, ...]]:
        """The step's inputs as text ("" when not given), and the names of those given
        as something other than text."""
        given = self.inputs if isinstance(self.inputs, dict) else {}
        values: dict[str, str] = {}
        not_text: list[str] = []
        for name in STEP_INPUTS:
            value = given.get(name)
            if value is not None and not isinstance(value, str):
                not_text.append(name)
            values[name] = value if isinstance(value, str) else ""
        return values, tuple(not_text)


def parse(model: type[Model], data: object) -> Model | None:
    """Validate a payload; None when it does not fit (the caller answers clearly)."""
    try:
        return model.model_validate(data)
    except ValidationError:
        return None


def state_values(view: _View) -> dict[str, str | None]:
    """Flatten view.state.values to {block_id: text} whatever the element type."""
    values: dict[str, str | None] = {}
    raw = view.state.get("values", {}) if isinstance(view.state, dict) else {}
    if not isinstance(raw, dict):
        return values
    for block_id, actions in raw.items():
        if not isinstance(actions, dict):
            continue
        for element in actions.values():
            if isinstance(element, dict):
                values[str(block_id)[:64]] = _element_value(element)
    return values


def _element_value(element: Mapping[str, object]) -> str | None:
    if isinstance(element.get("value"), str):
        return str(element["value"])[:3000]
    option = element.get("selected_option")
    if isinstance(option, dict) and isinstance(option.get("value"), str):
        return str(option["value"])[:200]
    when = element.get("selected_date_time")
    if isinstance(when, int | float) and not isinstance(when, bool):
        return _rfc3339(when)
    options = element.get("selected_options")
    if isinstance(options, list):
        return ",".join(str(o.get("value")) for o in options if isinstance(o, dict))
    return None


def _rfc3339(epoch_seconds: float) -> str:
    """A picked date-time as RFC 3339; a time no calendar holds is passed on as its raw
    number, for the form's checks to refuse by name."""
    try:
        return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return str(epoch_seconds)[:64]
