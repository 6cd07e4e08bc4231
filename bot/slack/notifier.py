"""SlackNotifier: the core's Notifier told in Slack messages.

A request is a root message in its channel; its approval prompt and notes are replies in
the thread, and its changes edit them. The root says a change is running only once it has
been running for a moment: a quick change's next edit, its result, would replace it at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from bot.core.api import (
    TERMINAL_STATES,
    ChangeRequestRecord,
    EventKind,
    NotDelivered,
    RequestEvent,
    RequestState,
    Tone,
    revertible,
    view_of,
)
from bot.providers.base import ClusterSummary
from bot.slack.approval_copies import dm_copy
from bot.slack.messenger import Messenger, SlackDeliveryError
from bot.slack.render import clusters, primitives, requests
from bot.slack.render.primitives import SlackMessage

log = logging.getLogger(__name__)
CopiesOf = Callable[[str], Awaitable[list[tuple[str, str]]]]  # request id: (channel, ts)s

_DECISION_WORDS: dict[EventKind, tuple[str, str]] = {
    "approved": (":white_check_mark:", "Approved"),
    "denied": (":no_entry_sign:", "Denied"),
    "cancelled": (":heavy_multiplication_x:", "Cancelled"),
    "confirmed": (":ballot_box_with_check:", "Confirmed"),
}
_NOTE_ICONS: dict[EventKind, str] = {
    "break_glass": ":rotating_light:",
    "refused": ":x:",
    "expired": ":alarm_clock:",
    "interrupted": ":warning:",
    "revert_requested": ":leftwards_arrow_with_hook:",
}
_RESULT_ICONS = {
    RequestState.SUCCEEDED: ":large_green_circle:",
    RequestState.FAILED: ":red_circle:",
}
_TONE_ICONS: dict[Tone, str] = {"good": ":large_green_circle:", "warning": ":warning:"}
# A change still being sent after this long is shown as running on its root.
RUNNING_AFTER_SECONDS = 1.5


def _prompt_minutes(record: ChangeRequestRecord) -> int:
    """The expiry the prompt stated when it was posted."""
    if record.expires_at is None:
        return 0
    return max(1, round((record.expires_at - record.created_at).total_seconds() / 60))


def _approvers(record: ChangeRequestRecord) -> list[str]:
    """Who approved: everyone counted when several were needed, else the decider."""
    if record.decided_by and record.decided_by in record.counted:
        return record.counted
    return [record.decided_by] if record.decided_by else []


def _to_requester(
    record: ChangeRequestRecord, event: RequestEvent, note: SlackMessage
) -> SlackMessage:
    """A note of a request's final state mentions its requester, unless they ended it."""
    if record.state not in TERMINAL_STATES or event.actor == record.requester:
        return note
    return requests.addressed(note, record.requester)


@dataclass
class _RunningEdit:
    """A change's "running" edit of its root: a timer until it is due, then the edit."""

    timer: asyncio.TimerHandle | None = None
    edit: asyncio.Task[None] | None = None


class SlackNotifier:
    """Implements bot.core.notifier.Notifier with Block Kit messages through a Messenger."""

    def __init__(
        self,
        messenger: Messenger,
        *,
        running_after: float = RUNNING_AFTER_SECONDS,
        copies: CopiesOf | None = None,
    ) -> None:
        self.messenger = messenger
        self.running_after = running_after
        # The DM copies of a request's prompt (SPEC §16): each edit of the prompt edits them.
        self.copies = copies
        self._running: dict[str, _RunningEdit] = {}

    async def request_opened(self, record: ChangeRequestRecord) -> str:
        return await self._post_or_raise(record.channel, requests.request_root(view_of(record)))

    async def approval_requested(self, record: ChangeRequestRecord, expire_minutes: int) -> str:
        prompt = requests.approval_prompt(view_of(record), expire_minutes=expire_minutes)
        return await self._post_or_raise(record.channel, prompt, thread_ts=record.root_ts)

    async def request_changed(self, record: ChangeRequestRecord, event: RequestEvent) -> None:
        if event.kind == "approval_added":
            await self._approval_added(record, event)
            return
        if event.kind == "rule_changed":
            await self._rule_changed(record, event)
            return
        await self._running_shown(record.id)  # its later edits come after that one
        if (event.left_pending or record.run_at is not None) and record.prompt_ts:
            # Replace the prompt's buttons with the outcome so nobody clicks a decided request.
            await self._edit_prompt(record, requests.approval_closed(view_of(record)))
        if record.root_ts and event.kind == "executing":
            self._show_running_soon(record, record.root_ts)
        elif record.root_ts:
            await self._edit(record.channel, record.root_ts, requests.request_root(view_of(record)))
        if event.summary_follows:
            return  # the summary tells the result
        note = self._thread_note(record, event)
        if note is not None:
            note = _to_requester(record, event, note)
            await self._post_or_log(record.channel, note, thread_ts=record.root_ts)

    def _show_running_soon(self, record: ChangeRequestRecord, root_ts: str) -> None:
        """Edit the root to "running" if the change is still being sent ``running_after``
        seconds from now (its next event cancels the edit, or waits for it)."""
        running = _RunningEdit()
        root = requests.request_root(view_of(record))

        def due() -> None:
            running.timer = None
            running.edit = asyncio.ensure_future(self._edit(record.channel, root_ts, root))
            running.edit.add_done_callback(lambda edit: self._edited(record.id, running, edit))

        running.timer = asyncio.get_running_loop().call_later(self.running_after, due)
        self._running[record.id] = running

    def _edited(self, request_id: str, running: _RunningEdit, edit: asyncio.Task[None]) -> None:
        if self._running.get(request_id) is running:
            del self._running[request_id]
        if not edit.cancelled() and edit.exception() is not None:
            log.error("showing %s running failed: %r", request_id, edit.exception())

    async def _running_shown(self, request_id: str) -> None:
        """The "running" edit of the request is not made, or has been made."""
        running = self._running.pop(request_id, None)
        if running is None:
            return
        if running.timer is not None:
            running.timer.cancel()
        if running.edit is not None:
            await asyncio.wait({running.edit})

    async def _approval_added(self, record: ChangeRequestRecord, event: RequestEvent) -> None:
        """One more of several approvals: the prompt shows the progress, keeping its
        buttons, and the thread says who approved."""
        view = view_of(record)
        if record.prompt_ts:
            minutes = _prompt_minutes(record)
            prompt = requests.approval_prompt(view, expire_minutes=minutes)
            await self._edit_prompt(record, prompt)
        if view.glass_by == event.actor:
            note = requests.break_glass_note(view)
        else:
            note = requests.decision_note(
                ":white_check_mark:", "Approved", event.actor, f"({event.text})"
            )
        await self._post_or_log(record.channel, note, thread_ts=record.root_ts)

    async def _rule_changed(self, record: ChangeRequestRecord, event: RequestEvent) -> None:
        """A policy reload changed what approving it takes: the prompt says it (its buttons
        kept), and the thread says it changed."""
        view = view_of(record)
        if record.prompt_ts:
            prompt = requests.approval_prompt(view, expire_minutes=_prompt_minutes(record))
            await self._edit_prompt(record, prompt)
        note = requests.rule_changed_note(view, event.text)
        await self._post_or_log(record.channel, note, thread_ts=record.root_ts)

    @staticmethod
    def _thread_note(record: ChangeRequestRecord, event: RequestEvent) -> SlackMessage | None:
        if event.kind in _DECISION_WORDS:
            icon, what = _DECISION_WORDS[event.kind]
            detail = f"Reason: {event.text}" if event.text else None
            return requests.decision_note(icon, what, event.actor, detail)
        if event.text is None:
            return None
        if event.kind == "finished":
            icon = _RESULT_ICONS.get(record.state, ":warning:")
        elif event.kind in _NOTE_ICONS:
            icon = _NOTE_ICONS[event.kind]
        else:
            return None  # withdrawn or executing: the edited root says it
        return requests.thread_note(event.text, icon=icon, mentions=(event.actor,))

    async def follow_up_note(self, record: ChangeRequestRecord, text: str, tone: Tone) -> None:
        note = requests.thread_note(text, icon=_TONE_ICONS[tone])
        await self._post_or_log(record.channel, note, thread_ts=record.root_ts)

    async def result(self, record: ChangeRequestRecord, summary: ClusterSummary) -> str | None:
        message = self._summary(record, summary)
        return await self._post_or_log(record.channel, message, thread_ts=record.root_ts)

    async def status(
        self, record: ChangeRequestRecord, summary: ClusterSummary, as_of: datetime
    ) -> None:
        message = self._summary(record, summary, f"status as of {as_of:%H:%M:%S} UTC")
        if record.summary_ts:
            try:
                await self.messenger.update(record.channel, record.summary_ts, message)
                return
            except SlackDeliveryError:
                pass  # the summary is gone or not editable: post the status as a new reply
        await self._post_or_log(record.channel, message, thread_ts=record.root_ts)

    async def mirror(self, record: ChangeRequestRecord, headline: str, channel: str) -> str | None:
        return await self._post_or_log(channel, _mirrored(record, headline))

    async def mirror_edit(self, record: ChangeRequestRecord, channel: str, ts: str) -> None:
        try:
            await self.messenger.update(channel, ts, _mirrored(record, FIRST_MIRROR_HEADLINE))
        except SlackDeliveryError as exc:
            log.warning("could not edit the copy of %s in %s: %s", record.id, channel, exc.code)

    async def policy_kept(self, channel: str, text: str) -> None:
        await self._post_or_log(channel, requests.thread_note(text, icon=":warning:"))

    @staticmethod
    def _summary(
        record: ChangeRequestRecord, summary: ClusterSummary, note: str | None = None
    ) -> SlackMessage:
        result = None
        if record.result_message:
            icon = _RESULT_ICONS.get(record.state, ":warning:")
            result = requests.thread_note(
                record.result_message, icon=icon, mentions=(record.requester,)
            )
        return clusters.cluster_summary(
            summary,
            requested_by=record.requester,
            approved_by=_approvers(record) if record.needs_approval else None,
            request_id=record.id,
            note=note,
            revert_id=record.id if revertible(record) else None,
            result=result,
        )

    async def _post_or_raise(
        self, channel: str, message: SlackMessage, *, thread_ts: str | None = None
    ) -> str:
        try:
            return await self.messenger.post(channel, message, thread_ts=thread_ts)
        except SlackDeliveryError as exc:
            raise NotDelivered(exc.code, exc.user_message) from exc

    async def _post_or_log(
        self, channel: str, message: SlackMessage, *, thread_ts: str | None = None
    ) -> str | None:
        try:
            return await self.messenger.post(channel, message, thread_ts=thread_ts)
        except SlackDeliveryError as exc:
            log.warning("could not post in %s: %s", channel, exc.code)
            return None

    async def _edit_prompt(self, record: ChangeRequestRecord, message: SlackMessage) -> None:
        """Edit the prompt in the thread and each of its DM copies alike."""
        if record.prompt_ts:
            await self._edit(record.channel, record.prompt_ts, message)
        # Only a request judged against on-call approvers has copies: others ask for none.
        if self.copies is None or "oncall_now" not in (record.approvals or {}):
            return
        for channel, ts in await self.copies(record.id):
            await self._edit(channel, ts, dm_copy(record, message))

    async def _edit(self, channel: str, ts: str, message: SlackMessage) -> None:
        with contextlib.suppress(SlackDeliveryError):
            await self.messenger.update(channel, ts, message)


FIRST_MIRROR_HEADLINE = "Change requested"


def _mirrored(record: ChangeRequestRecord, headline: str) -> SlackMessage:
    """A request's copy in its notify channel: ``headline``, then the request as its
    thread's root shows it now."""
    root = requests.request_root(view_of(record))
    said = primitives.composed_text(headline, (record.requester, record.decided_by or ""))
    return SlackMessage(
        text=f"{said} — {root.text}",
        # A copy tells; it carries no buttons (an agent's proposal is confirmed in its thread).
        blocks=[primitives.context(said), *(b for b in root.blocks if b.get("type") != "actions")],
    )
