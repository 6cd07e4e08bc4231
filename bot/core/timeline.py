"""``/gpu timeline``: a channel's record for the postmortem (SPEC §10), as Markdown, one line
per event in time order (UTC), written a page of the audit trail at a time.

``prepare`` decides what a person may have (the window, the projects they may see in that
channel); ``write`` streams the file to a binary sink, so memory stays bounded however busy
the channel's week was. A surface uploads what was written."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import BinaryIO, Protocol

from bot.core.access import Access, Refusal
from bot.core.answers import Reply, notice
from bot.core.policy import Role
from bot.core.since import SinceError, parse_since
from bot.core.store import AuditEntry
from bot.core.store.timeline import ChannelEvent

DEFAULT_SPAN = timedelta(hours=24)
MAX_SPAN = timedelta(days=7)
PAGE_SIZE = 500
_TEXT_MAX = 600
_MARKDOWN_ACTIVE = re.compile(r"([\\`*_\[\]<>|#~])")
_SPACE = re.compile(r"\s+")
_SLACK_USER = re.compile(r"[UW][A-Z0-9]{2,}")
_NAME_MAX = 80
Names = Mapping[str, str]
"""Slack user id → display name, for the people a file names."""


class DisplayNames(Protocol):
    """The port that names people (Slack's ``users.info``)."""

    async def display_names(self, users: Sequence[str]) -> Names | None:
        """The names it found of ``users`` (an unknown person is left out); None when
        people cannot be named now (a scope the installation lacks, Slack unreachable)."""
        ...


@dataclass(frozen=True)
class TimelineRequest:
    """What one timeline covers: whose, where, when, and which projects' events."""

    user: str
    channel: str
    since: datetime
    until: datetime
    projects: tuple[str, ...]
    notify_projects: tuple[str, ...]  # of those, the ones whose notify channel this is

    @property
    def filename(self) -> str:
        return f"gpuops-timeline-{self.channel}-{_compact(self.since)}-{_compact(self.until)}.md"

    @property
    def title(self) -> str:
        return f"gpuops timeline of {self.channel}, {_when(self.since)} to {_when(self.until)}"


class Timeline:
    """Builds timelines from the audit trail."""

    def __init__(
        self, access: Access, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.access = access
        self.clock = clock

    async def prepare(self, user: str, channel: str, since: str | None) -> TimelineRequest:
        """The timeline ``user`` may have of ``channel``; a Refusal says why not."""
        now = self.clock()
        try:
            start = now - DEFAULT_SPAN if since is None else parse_since(since, now)
        except SinceError as exc:
            raise Refusal(f"{exc} Usage: `/gpu timeline [since]`", kind="usage") from None
        if now - start > MAX_SPAN:
            raise Refusal(
                "a timeline covers at most 7 days: give `7d` or less, or a time since "
                f"{_when(now - MAX_SPAN)} UTC.",
                kind="usage",
            )
        projects = await self.access.authorizer.projects_for(user, channel, Role.viewer)
        if not projects:
            raise Refusal(
                "you may see no project in this channel, so there is no timeline of it for you.",
                kind="not_authorized",
            )
        policy = self.access.policy.projects
        notify = [p for p in projects if policy[p].notify_channel == channel]
        return TimelineRequest(user, channel, start, now, tuple(projects), tuple(notify))

    def provider_title(self, project: str | None) -> str:
        """How people name the project's provider (its descriptor's title)."""
        return self.access.policy.provider_title(project)

    async def write(
        self, request: TimelineRequest, out: BinaryIO, people: DisplayNames | None = None
    ) -> int:
        """Write the Markdown file to ``out``; how many events it lists. With ``people``,
        each person is named (looked up once per file), else written as ``@U…``."""
        names = _NameCache(people)
        await names.learn([request.user])
        _write(out, _header(request, names.known))
        count = 0
        after: tuple[datetime, int] | None = None
        while True:
            page = await self.access.store.channel_events(
                channel=request.channel,
                projects=request.projects,
                notify_projects=request.notify_projects,
                since=request.since,
                until=request.until,
                after=after,
                limit=PAGE_SIZE,
            )
            await names.learn([event.entry.actor for event in page])
            for event in page:
                line = event_line(event, self.provider_title, names.known)
                if line is not None:
                    _write(out, f"- {line}\n")
                    count += 1
            if len(page) < PAGE_SIZE:
                break
            after = page[-1].key
        _write(out, _footer(count))
        return count


class _NameCache:
    """The names of one file's people, each looked up once."""

    def __init__(self, people: DisplayNames | None) -> None:
        self._people = people
        self.known: dict[str, str] = {}
        self._asked: set[str] = set()

    async def learn(self, actors: Sequence[str]) -> None:
        if self._people is None:
            return
        new = sorted({a for a in actors if _SLACK_USER.fullmatch(a)} - self._asked)
        if not new:
            return
        self._asked.update(new)
        found = await self._people.display_names(new)
        if found is None:  # not now: the rest of the file names people by their ids
            self._people = None
            return
        self.known.update({user: name for user, name in found.items() if name.strip()})


def _write(out: BinaryIO, text: str) -> None:
    out.write(text.encode("utf-8"))


def _compact(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%MZ")


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def md(value: object, limit: int = _TEXT_MAX) -> str:
    """User or provider text as one inert Markdown line: no line breaks (one event, one
    line), no emphasis, code, links or HTML; at most ``limit`` characters."""
    text = _SPACE.sub(" ", str(value)).strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return _MARKDOWN_ACTIVE.sub(r"\\\1", text)


def person(actor: str, names: Names | None = None) -> str:
    """Who did it, as the file can say it: ``Dave (@U04DAVE)`` for a Slack user whose name
    is known, else ``@U04DAVE`` (a file is not mrkdwn, so a mention would stay literal);
    anyone else (``gpuops``, a workflow) as recorded."""
    if not _SLACK_USER.fullmatch(actor):
        return md(actor)
    name = (names or {}).get(actor)
    return f"{md(name, _NAME_MAX)} (@{actor})" if name else f"@{actor}"


def _header(request: TimelineRequest, names: Names) -> str:
    projects = ", ".join(md(p) for p in request.projects)
    return (
        f"# gpuops timeline of {md(request.channel)}\n\n"
        f"{_when(request.since)} to {_when(request.until)} UTC · projects you may see here: "
        f"{projects} · asked by {person(request.user, names)}\n\n"
    )


def _footer(count: int) -> str:
    listed = "No events in this window." if count == 0 else f"{count} events."
    return (
        f"\n{listed} Each line is an entry of gpuops's audit trail; the `#…` at its end is the "
        "start of that entry's hash (`gpuops audit export` has it whole, `gpuops audit verify` "
        "checks the chain).\n"
    )


def event_line(
    event: ChannelEvent, provider_title: Callable[[str | None], str], names: Names | None = None
) -> str | None:
    """``2026-12-01 09:21:04Z · …`` for one event; None for an entry that is not the
    channel's story (a person's refused click or command). ``provider_title`` names a
    project's provider as its descriptor does; ``names`` the people it knows."""
    entry = event.entry
    who = person(entry.actor, names)
    what = (
        _request_text(event, who)
        if entry.request_id
        else _watch_text(entry, provider_title(entry.project), who)
    )
    if what is None:
        return None
    return f"{entry.at.strftime('%Y-%m-%d %H:%M:%SZ')} · {what} · `#{entry.short_hash}`"


def _cluster(event: ChannelEvent) -> str:
    entry = event.entry
    where = f"{md(entry.cluster_id or '?')}, {md(entry.project or '?')}"
    return f"{md(event.cluster_name)} ({where})" if event.cluster_name else f"{where}"


def _request_text(event: ChannelEvent, who: str) -> str | None:
    entry, detail = event.entry, event.entry.detail
    rid = f"**{md(entry.request_id)}**"
    event_name = entry.event
    if event_name == "requested":
        line = f"{rid} requested by {who}: {md(event.action or '?')} on {_cluster(event)}"
        if detail.get("preview"):
            line += f" — {md(detail['preview'])}"
        if detail.get("run_at"):
            line += f" · scheduled for {md(detail['run_at'])}"
        if detail.get("reason"):
            line += f" · reason: {md(detail['reason'])}"
        return line
    if event_name == "freeze_override":
        until = f" (until {md(detail['until'])})" if detail.get("until") else ""
        return (
            f"{rid} freeze override by {who}: {md(entry.outcome or '?')}{until}"
            f" · justification: {md(detail.get('reason', ''))}"
        )
    if event_name == "refused":
        if "command" in detail:  # a refused click or command: shown to that person only
            return None
        return f"{rid} failed before it was sent ({md(entry.outcome)}): {md(detail.get('reason'))}"
    if event_name == "approved":
        glass = " (break glass: their own request)" if detail.get("break_glass") else ""
        reason = f" · reason: {md(detail['reason'])}" if detail.get("reason") else ""
        return f"{rid} approved by {who}{glass}{reason}"
    if event_name == "break_glass":
        reason = f" · reason: {md(detail['reason'])}" if detail.get("reason") else ""
        return (
            f"{rid} break glass by {who}: their own request, one approval "
            f"({md(entry.outcome or '?')}){reason}"
        )
    if event_name in PLAN_WORDS:  # a staged plan's steps (SPEC §14)
        step = (
            f" step {detail['step']}/{detail['steps']}" if {"step", "steps"} <= set(detail) else ""
        )
        said = detail.get("why") or detail.get("message")
        return f"{rid} plan{step} {PLAN_WORDS[event_name]} by {who}" + (
            f": {md(said)}" if said else ""
        )
    why = f" · reason: {md(detail['reason'])}" if detail.get("reason") else ""
    simple = {
        "denied": f"{rid} denied by {who}{why}",
        "cancelled": f"{rid} cancelled by {who}{why}",
        "withdrawn": f"{rid} withdrawn: {md(detail.get('reason', ''))}",
        "expired": f"{rid} expired: nobody decided in time",
        "executing": f"{rid} sending the change to {_cluster(event)}",
        "status": f"{rid} follow-up: {_cluster(event)} is {md(entry.outcome)}",
        "approval_added": f"{rid} approved by {who} ({md(entry.outcome)}): not yet enough",
        "approval_rule_changed": (
            f"{rid} approval rule changed by a policy reload: {md(entry.outcome)} approvals"
        ),
    }
    if event_name in simple:
        return simple[event_name]
    if event_name == "result":
        said = detail.get("message") or detail.get("reason")
        return f"{rid} final state **{md(entry.outcome)}**" + (f": {md(said)}" if said else "")
    return None


def _watch_text(entry: AuditEntry, provider: str, by: str) -> str | None:
    detail, where = entry.detail, f"{md(entry.cluster_id or '?')} ({md(entry.project or '?')})"
    node = md(detail.get("node", "?"))
    if entry.event == "health_alert":
        if entry.outcome == "recovered":
            return f"health: {where} is {md(detail.get('status'))} again"
        before, now = md(detail.get("previous_status")), md(detail.get("status"))
        return f"health alert: {where} went {before} → {now}"
    if entry.event == "remediation_posted":
        proposed = f"remediation proposed by {md(provider)} for node {node} of {where}"
        return f"{proposed}, awaiting approval"
    if entry.event in ("remediation_approve", "remediation_reject"):
        verb = "approval" if entry.event.endswith("approve") else "rejection"
        said = f" ({md(detail['detail'])})" if detail.get("detail") else ""
        outcome = md(entry.outcome)
        return f"remediation of node {node} of {where}: {verb} by {by} — {outcome}{said}"
    if entry.event == "remediation_decided_elsewhere":
        return f"remediation on {where} decided at {md(provider)}: {md(entry.outcome)}"
    if entry.event == "remediation_reopened":
        return f"remediation on {where} awaits a decision again (the last one was not taken)"
    if entry.event == "reservation_reminder":
        ends = md(detail.get("reservation_end_time", "?"))
        return f"reminder: the reservation of {where} ends {ends} ({md(detail.get('horizon', ''))})"
    return None


PLAN_WORDS = {
    "plan_begin": "started",
    "plan_sent": "sent",
    "plan_send_failed": "failed",
    "plan_send_unknown": "outcome unknown",
    "plan_resolved_applied": "found applied",
    "plan_pass": "passed its soak",
    "plan_complete": "passed its soak, plan complete",
    "plan_hold": "stopped",
    "plan_stop": "stopped",
    "plan_pause": "paused",
    "plan_resume": "resumed",
    "plan_abort": "aborted",
    "plan_revert": "ended by a revert to its start",
}


def building(request: TimelineRequest) -> Reply:
    """What the person hears at once: the file follows."""
    return notice(
        f"Building the timeline of <#{request.channel}> from {_when(request.since)} to "
        f"{_when(request.until)} UTC ({', '.join(request.projects)}); the file follows here."
    )


def nothing_to_list(request: TimelineRequest) -> Reply:
    return notice(
        f"Nothing happened in <#{request.channel}> from {_when(request.since)} to "
        f"{_when(request.until)} UTC in the projects you may see here "
        f"({', '.join(request.projects)}), so there is no file to share."
    )


def shared_comment(request: TimelineRequest, count: int) -> str:
    """The text that introduces the file (Slack mrkdwn: only ids, nothing escaped away)."""
    return (
        f"Timeline of <#{request.channel}> for <@{request.user}>: {count} events from "
        f"{_when(request.since)} to {_when(request.until)} UTC."
    )
