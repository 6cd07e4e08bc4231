"""What the core answers the person who asked, as data each surface renders.

A ``Reply`` holds a notice, a cluster card or a listing; a surface decides how it looks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.core.paging import Page
from bot.core.policy import Role
from bot.core.store import AuditEntry
from bot.providers.base import ClusterSummary, ProviderChanges


@dataclass(frozen=True)
class Notice:
    """A sentence the core composed (it may embed user text, which a surface escapes);
    ``error`` marks a refusal or a failure. ``mentions`` are user ids written ``<@id>`` in
    the text that a surface may show as real mentions."""

    text: str
    error: bool = False
    mentions: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterCard:
    """One cluster's summary, shown for someone."""

    summary: ClusterSummary
    shown_by: str | None = None


@dataclass(frozen=True)
class ClusterListing:
    """Per project, its clusters, or the text of why they could not be listed — one page of
    them when ``page`` is given (a project may continue on the next page)."""

    groups: Mapping[str, Sequence[ClusterSummary] | str]
    page: Page | None = None
    # How old the oldest fleet snapshot behind the page is (bot.core.fleet), in seconds.
    as_of_seconds: float | None = None


@dataclass(frozen=True)
class AuditListing:
    """Audit entries, newest first — one page of them when ``page`` is given."""

    entries: Sequence[AuditEntry]
    page: Page | None = None


@dataclass(frozen=True)
class HelpCard:
    """What a person may do: their role in each project they can reach here (never empty),
    and what each provider of the catalog can change."""

    roles: Mapping[str, Role]
    changes: Sequence[ProviderChanges]


@dataclass(frozen=True)
class PolicyCard:
    """``/gpu policy``: per project the person may see, its guardrails in lines."""

    projects: Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class SpendCard:
    """``/gpu spend``: per scope (a project or a team), its month in lines."""

    scopes: Sequence[Sequence[str]]


Content = Notice | ClusterCard | ClusterListing | AuditListing | HelpCard | PolicyCard | SpendCard


@dataclass(frozen=True)
class Reply:
    """What the person who acted should see; ``public`` shows it to the whole channel."""

    content: Content
    public: bool = False


def notice(text: str, *, public: bool = False) -> Reply:
    return Reply(Notice(text), public=public)


def error(text: str, *, mentions: tuple[str, ...] = ()) -> Reply:
    return Reply(Notice(text, error=True, mentions=mentions))


STORE_UNAVAILABLE_TEXT = (
    "The state store is unavailable, so nothing was changed. Try again in a minute."
)


def store_unavailable() -> Reply:
    """The answer to anything that needs the state store while it cannot be reached."""
    return error(STORE_UNAVAILABLE_TEXT)
