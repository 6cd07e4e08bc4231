"""A change command's text, followed from the Slack handler to the provider call, only ever
goes down: it is read once (the grammar, the fields), its asker's role checked once, and it
becomes one ``ChangeAsk`` that the workflow takes as it is (issue #35).

The trace records each call that is handed the text or a value made of it (the command as
read, the ``ChangeAsk``, the ask's inputs); every such call is made from a layer above the
one it enters, or from the same one."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, cast

import pytest
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.context.respond.async_respond import AsyncRespond

from bot.core.ask.change import ChangeAsk
from bot.core.ask.grammar import ChangeCommand
from bot.core.ask.reading import ReadCommand
from bot.core.policy import Role
from bot.slack.bolt_context import Services, put_services
from handlers.commands import handle_gpu
from tests.support.core_harness import CHANNEL, DAVE, Core, core_harness

TEXT = "update together-prod tc-h200-ondemand num_gpus=16"

# From the top: a value handed from a layer to one above it went back up.
LAYERS = (
    ("handlers",),
    ("bot.slack",),
    ("bot.core.service", "bot.core.ask"),  # the core's front: reading and the one check
    ("bot.core.requests.workflow",),
    ("bot.core.requests",),
    ("bot.core.guardrails", "bot.core.access", "bot.core.authorizer", "bot.core.registry"),
    ("bot.providers",),
)


def layer_of(module: str) -> int | None:
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None  # asyncio, pydantic, the tests: not on the path


@dataclass
class Trace:
    """The calls handed the command or a value made of it, in order."""

    text: str
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # caller, callee, function
    tracked: set[int] = field(default_factory=set)  # ids of the ask's inputs
    frames: dict[str, list[FrameType]] = field(default_factory=dict)  # each call's, by name

    def carries(self, value: object) -> bool:
        if value is self.text or id(value) in self.tracked:
            return True
        if isinstance(value, ChangeAsk):
            inputs = value.__dict__.get("inputs")  # None while pydantic builds it
            if inputs is not None:
                self.tracked.add(id(inputs))
            return True
        return isinstance(value, ReadCommand | ChangeCommand)

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        module = str(frame.f_globals.get("__name__", ""))
        if layer_of(module) is not None:
            seen = self.frames.setdefault(code.co_name, [])
            if not any(f is frame for f in seen):  # a coroutine resumed is the same call
                seen.append(frame)
        count = code.co_argcount + code.co_kwonlyargcount
        args = [frame.f_locals.get(name) for name in code.co_varnames[:count]]
        if not any(self.carries(value) for value in args):
            return
        caller = frame.f_back
        while caller is not None and layer_of(str(caller.f_globals.get("__name__"))) is None:
            caller = caller.f_back  # through asyncio's resumption and pydantic's internals
        above = str(caller.f_globals.get("__name__")) if caller is not None else ""
        self.calls.append((above, module, code.co_name))

    def modules(self) -> list[str]:
        """The modules the command entered, in order, each run of calls within one once."""
        order: list[str] = []
        for _, module, _ in self.calls:
            if layer_of(module) is not None and (not order or order[-1] != module):
                order.append(module)
        return order

    def called(self, function: str) -> int:
        return len(self.frames.get(function, []))

    def role_checks(self, role: Role) -> int:
        return sum(1 for f in self.frames.get("require", []) if f.f_locals.get("needed") is role)


@contextmanager
def tracing(text: str) -> Iterator[Trace]:
    trace = Trace(text)
    sys.setprofile(trace.profile)
    try:
        yield trace
    finally:
        sys.setprofile(None)


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[Core]:
    async with core_harness(tmp_path) as made:
        yield made


async def test_a_change_command_goes_down_from_the_handler_to_the_provider(core: Core) -> None:
    told: list[dict[str, Any]] = []

    async def ack(**_: Any) -> None:
        return None

    async def respond(**message: Any) -> None:
        told.append(message)

    body: dict[str, object] = {
        "user_id": DAVE,
        "channel_id": CHANNEL,
        "text": TEXT,
        "trigger_id": "T1",
    }
    context = AsyncBoltContext()
    unused: Any = None  # the command path reads only the command service
    put_services(
        context,
        Services(
            ops=core.ops,
            messenger=unused,
            home=unused,
            home_refresher=unused,
            desk=unused,
            steps=unused,
        ),
    )
    with tracing(TEXT) as trace:
        await handle_gpu(cast(AsyncAck, ack), body, cast(AsyncRespond, respond), context)
    await core.workflow.drain()
    path = trace.modules()
    upward = [
        (caller, callee, name)
        for caller, callee, name in trace.calls
        if (above := layer_of(caller)) is not None
        and (below := layer_of(callee)) is not None
        and below < above
    ]
    assert upward == [], f"handed back up: {upward}; path: {path}"
    assert trace.calls[0][0] == "handlers.commands", trace.calls[0]  # where it was typed
    planned = [(caller, name) for caller, callee, name in trace.calls if layer_of(callee) == 6]
    assert ("bot.core.access", "plan") in planned, path  # the provider's check of the change
    entered = {rank for module in path if (rank := layer_of(module)) is not None}
    assert sorted(entered) == [0, 2, 3, 4, 5, 6], path  # handed to no Slack rendering
    # Read once, its fields checked once, its asker's role checked once, one ask made.
    assert trace.called("parse_command") == 1
    assert trace.called("unknown_fields") == 1
    assert trace.role_checks(Role.operator) == 1
    assert trace.called("of_command") == 1
    assert "bot.core.requests.opening" in path and "bot.core.ask.reading" in path
    assert told, "the person was answered"
    [record] = await core.store.list_requests()
    assert (record.action, record.requester) == ("update", DAVE), record
