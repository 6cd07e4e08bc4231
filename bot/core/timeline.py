"""``/gpu timeline``: a channel's record for the postmortem (SPEC §10), as Markdown, one line
per event in time order (UTC), written a page of the audit trail at a time.

``prepare`` decides what a person may have (the window, the projects they may see in that
channel); ``write`` streams the file to a binary sink, so memory stays bounded however busy
the channel's week was. A surface uploads what was written."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import BinaryIO, Protocol

from bot.core.access import Access, Refusal
from bot.core.answers import Reply, notice
from bot.core.policy import Role
from bot.core.since import SinceError, parse_since
from bot.core.store.timeline import ChannelEvent
from bot.core.timeline_lines import SLACK_USER, Names, event_line, md, person

DEFAULT_SPAN = timedelta(hours=24)
MAX_SPAN = timedelta(days=7)
PAGE_SIZE = 500
# The events one file lists: its cost (the store's pages, a line each, the upload) stays
# bounded however busy the window was; what is left out is counted and said, with how to
# get it (a later ``since``, or ``gpuops audit export``).
MAX_EVENTS = 1_000
LEFT_OUT_COUNTED = 10_000  # the events left out are counted up to this many


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
    ) -> Written:
        """Write the Markdown file to ``out``: the window's first ``MAX_EVENTS`` events, and
        what was left out and how to get it. With ``people``, each person is named (looked
        up once per file), else written as ``@U…``."""
        names = _NameCache(people)
        await names.learn([request.user])
        _write(out, _header(request, names.known))
        count, read = 0, 0
        after: tuple[datetime, int] | None = None
        while True:
            limit = min(PAGE_SIZE, MAX_EVENTS + 1 - read)  # one more: is anything left out?
            page = await self._page(request, after, limit)
            listed = page[: MAX_EVENTS - read]
            await names.learn([event.entry.actor for event in listed])
            for event in listed:
                line = event_line(event, self.provider_title, names.known)
                if line is not None:
                    _write(out, f"- {line}\n")
                    count += 1
            read += len(listed)
            if len(page) > len(listed):  # the file is full: count the rest, up to a bound
                left = await self.access.store.count_channel_events(
                    channel=request.channel,
                    projects=request.projects,
                    notify_projects=request.notify_projects,
                    since=request.since,
                    until=request.until,
                    after=listed[-1].key if listed else after,
                    up_to=LEFT_OUT_COUNTED + 1,
                )
                written = Written(count, left, page[len(listed)].entry.at)
                break
            if len(page) < limit:
                written = Written(count)
                break
            after = page[-1].key
        _write(out, _footer(written, request))
        return written

    async def _page(
        self, request: TimelineRequest, after: tuple[datetime, int] | None, limit: int
    ) -> list[ChannelEvent]:
        return await self.access.store.channel_events(
            channel=request.channel,
            projects=request.projects,
            notify_projects=request.notify_projects,
            since=request.since,
            until=request.until,
            after=after,
            limit=limit,
        )


@dataclass(frozen=True)
class Written:
    """What one file lists, and what of the window it left out."""

    listed: int
    left_out: int = 0  # counted up to LEFT_OUT_COUNTED + 1 (more than the bound)
    resume_at: datetime | None = None  # the time of the first event left out

    @property
    def left_out_text(self) -> str:
        """``56,123 more events`` or ``more than 10,000 more events``."""
        if self.left_out > LEFT_OUT_COUNTED:
            return f"more than {LEFT_OUT_COUNTED:,} more events"
        return f"{self.left_out:,} more event{'s' * (self.left_out != 1)}"


class _NameCache:
    """The names of one file's people, each looked up once."""

    def __init__(self, people: DisplayNames | None) -> None:
        self._people = people
        self.known: dict[str, str] = {}
        self._asked: set[str] = set()

    async def learn(self, actors: Sequence[str]) -> None:
        if self._people is None:
            return
        new = sorted({a for a in actors if SLACK_USER.fullmatch(a)} - self._asked)
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


def _header(request: TimelineRequest, names: Names) -> str:
    projects = ", ".join(md(p) for p in request.projects)
    return (
        f"# gpuops timeline of {md(request.channel)}\n\n"
        f"{_when(request.since)} to {_when(request.until)} UTC · projects you may see here: "
        f"{projects} · asked by {person(request.user, names)}\n\n"
    )


def _footer(written: Written, request: TimelineRequest) -> str:
    count = written.listed
    listed = "No events in this window." if count == 0 else f"{count:,} events."
    told = (
        f"\n{listed} Each line is an entry of gpuops's audit trail; the `#…` at its end is the "
        "start of that entry's hash (`gpuops audit export` has it whole, `gpuops audit verify` "
        "checks the chain).\n"
    )
    if written.resume_at is None:
        return told
    resume = written.resume_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    projects = ", ".join(md(p) for p in request.projects)
    return told + (
        f"\n**This file stops at {MAX_EVENTS:,} events**: {written.left_out_text} of this "
        f"window, from {_when(written.resume_at)} UTC on, are not listed. For them, ask "
        f"`/gpu timeline {resume}` here (the rest of the window, again up to {MAX_EVENTS:,} "
        f"events), or an admin can run `gpuops audit export --since {resume} --project "
        f"<project>` for {projects} (every entry of the project from then on, whichever "
        "channel it was in).\n"
    )


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


def shared_comment(request: TimelineRequest, written: Written) -> str:
    """The text that introduces the file (Slack mrkdwn: only ids, nothing escaped away)."""
    said = (
        f"Timeline of <#{request.channel}> for <@{request.user}>: {written.listed:,} events "
        f"from {_when(request.since)} to {_when(request.until)} UTC"
    )
    if written.resume_at is None:
        return said + "."
    return (
        f"{said}, the window's first; {written.left_out_text} from "
        f"{_when(written.resume_at)} UTC on are not in the file (it ends saying how to get them)."
    )
