"""The core harness's notifier: implements the core's Notifier port, records every call in
order (with the record as it was told), and fails or hangs a call when a test says so."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from bot.core.notifier import EventKind, RequestEvent, Tone
from bot.core.store import ChangeRequestRecord, RequestState
from bot.providers.base import ClusterSummary
from tests.support.core_script import Hang, Step
from tests.support.transaction_guard import note

METHODS = (
    "request_opened",
    "approval_requested",
    "request_changed",
    "follow_up_note",
    "result",
    "status",
    "mirror",
)


@dataclass(frozen=True)
class Told:
    """One call of the port: which method, about which request in which state, and what."""

    method: str
    record: ChangeRequestRecord
    kind: EventKind | None = None  # request_changed: the event
    actor: str | None = None
    text: str | None = None  # the event's text, a note, a mirror's headline
    tone: Tone | None = None
    channel: str | None = None  # mirror: where to
    summary: ClusterSummary | None = None  # result and status
    left_pending: bool = False
    failed: bool = False  # the call raised (scripted)

    @property
    def request_id(self) -> str:
        return self.record.id

    @property
    def state(self) -> RequestState:
        return self.record.state


class RecordingNotifier:
    """Every call in ``told``; ``fail``/``hang`` script the next call of a method."""

    def __init__(self) -> None:
        self.told: list[Told] = []
        self._steps: dict[str, deque[Step]] = {}
        self._handles = itertools.count(1)
        self._changed = asyncio.Condition()
        self.mirrors_delivered = True  # False: the notify channel refuses its copies
        self.policy_notes: list[tuple[str, str]] = []  # policy_kept: (channel, text)

    # -- scripting -----------------------------------------------------------------------
    def fail(self, method: str, error: BaseException, *, times: int = 1) -> None:
        """The next ``times`` calls of ``method`` raise ``error`` (e.g. NotDelivered)."""
        assert method in METHODS, method
        self._steps.setdefault(method, deque()).extend(Step(error=error) for _ in range(times))

    def hang(self, method: str, *, then: BaseException | None = None) -> Hang:
        """The next call of ``method`` waits until released (then raises ``then`` if set)."""
        assert method in METHODS, method
        hang = Hang()
        self._steps.setdefault(method, deque()).append(Step(hang=hang, error=then))
        return hang

    # -- reading -------------------------------------------------------------------------
    def of(self, request_id: str, method: str | None = None) -> list[Told]:
        return [
            t
            for t in self.told
            if t.request_id == request_id and (method is None or t.method == method)
        ]

    def events(self, request_id: str) -> list[EventKind]:
        """The request_changed event kinds told about a request, in order."""
        return [t.kind for t in self.of(request_id, "request_changed") if t.kind is not None]

    def methods(self, request_id: str) -> list[str]:
        return [t.method for t in self.of(request_id)]

    def mirrors(self, request_id: str) -> list[str]:
        return [t.text or "" for t in self.of(request_id, "mirror") if not t.failed]

    def notes(self, request_id: str) -> list[str]:
        return [t.text or "" for t in self.of(request_id, "follow_up_note")]

    async def wait_for(self, found: Callable[[], bool], *, within: float = 10.0) -> None:
        """Wait until ``found()`` holds, re-checked on every call of the port."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(found), within)

    # -- the port ------------------------------------------------------------------------
    async def _tell(self, told: Told) -> None:
        note(f"notifier {told.method}")
        queue = self._steps.get(told.method)
        step = queue.popleft() if queue else None
        failed = step is not None and step.error is not None
        self.told.append(replace(told, failed=True) if failed else told)
        async with self._changed:
            self._changed.notify_all()
        if step is None:
            return
        if step.hang is not None:
            step.hang.entered.set()
            await step.hang.released.wait()
        if step.error is not None:
            raise step.error

    def _handle(self, what: str) -> str:
        return f"{what}-{next(self._handles)}"

    async def request_opened(self, record: ChangeRequestRecord) -> str:
        await self._tell(Told("request_opened", record))
        return self._handle("root")

    async def approval_requested(self, record: ChangeRequestRecord, expire_minutes: int) -> str:
        await self._tell(Told("approval_requested", record, text=str(expire_minutes)))
        return self._handle("prompt")

    async def request_changed(self, record: ChangeRequestRecord, event: RequestEvent) -> None:
        await self._tell(
            Told(
                "request_changed",
                record,
                kind=event.kind,
                actor=event.actor,
                text=event.text,
                left_pending=event.left_pending,
            )
        )

    async def follow_up_note(self, record: ChangeRequestRecord, text: str, tone: Tone) -> None:
        await self._tell(Told("follow_up_note", record, text=text, tone=tone))

    async def result(self, record: ChangeRequestRecord, summary: ClusterSummary) -> str | None:
        await self._tell(Told("result", record, summary=summary))
        return self._handle("summary")

    async def status(
        self, record: ChangeRequestRecord, summary: ClusterSummary, as_of: datetime
    ) -> None:
        await self._tell(Told("status", record, summary=summary, text=as_of.isoformat()))

    async def mirror(self, record: ChangeRequestRecord, headline: str, channel: str) -> str | None:
        delivered = self.mirrors_delivered
        await self._tell(
            Told("mirror", record, text=headline, channel=channel, failed=not delivered)
        )
        return f"mirror-{record.id}-{len(self.told)}" if delivered else None

    async def mirror_edit(self, record: ChangeRequestRecord, channel: str, ts: str) -> None:
        await self._tell(Told("mirror_edit", record, text=str(record.state), channel=channel))

    async def policy_kept(self, channel: str, text: str) -> None:
        self.policy_notes.append((channel, text))
        async with self._changed:
            self._changed.notify_all()
