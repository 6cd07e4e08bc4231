"""Pages of long answers: which items a page holds and how to ask for the next one.

Nothing is cut: every item of a list or audit answer is on exactly one page, and each page
says its range, the total and the command that shows the next page."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

LIST_PAGE_SIZE = 40  # rows of /gpu list on one page (a cluster, or a project's note)
_RANGE = "\u2013"  # an en dash between the first and last item numbers
AUDIT_PAGE_SIZE = 20  # audit entries on one page (each may carry a 500-character reason)
AUDIT_COUNT_BOUND = 500  # /gpu audit counts a trail up to this, then says "500+"


@dataclass(frozen=True)
class Page:
    """Where a page sits: ``first`` to ``last`` of ``total`` counted items (1-based; 0 when the
    page holds none), page ``number`` of ``count``. ``asked`` is the page number asked for
    when it was past the end (the last page is shown instead)."""

    number: int
    count: int
    first: int
    last: int
    total: int
    noun: str
    command: str
    asked: int | None = None
    # How many there are in all when only the newest ``total`` were asked for, and the
    # command that asks for more of them.
    available: int | None = None
    more_command: str | None = None
    # ``available`` is a bound: there are more than it (said "500+", not counted to the end).
    available_bounded: bool = False

    @property
    def next_command(self) -> str | None:
        """The command that shows the next page, None on the last one."""
        if self.number >= self.count:
            return None
        return f"{self.command} page={self.number + 1}"

    @property
    def summary(self) -> str:
        """``clusters 1\u201340 of 62 · page 1 of 2 · next: /gpu list together-prod page=2``."""
        of = f"{self.total}"
        if self.available is not None and self.available > self.total:
            bound = "+" if self.available_bounded else ""
            of = f"the newest {self.total} ({self.available}{bound} in all)"
        shown = (
            f"{self.noun} {self.first}{_RANGE}{self.last} of {of}"
            if self.last
            else f"{self.total} {self.noun}"
        )
        parts = [shown]
        if self.count > 1:
            parts.append(f"page {self.number} of {self.count}")
        following = self.next_command
        if following:
            parts.append(f"next: {following}")
        if self.more_command:
            parts.append(f"more: {self.more_command}")
        return " · ".join(parts)

    @property
    def past_end(self) -> str | None:
        """What to tell someone who asked for a page that does not exist, else None."""
        if self.asked is None:
            return None
        pages = "1 page" if self.count == 1 else f"{self.count} pages"
        return f"there is no page {self.asked}: this answer has {pages}; here is page {self.count}."


def page_of(items: Sequence[T], number: int, size: int) -> tuple[int, int, Sequence[T]]:
    """(page number shown, page count, the items on it): past the end shows the last page."""
    count = max(1, -(-len(items) // size))
    shown = min(max(number, 1), count)
    return shown, count, items[(shown - 1) * size : shown * size]


def counted_range(flags: Sequence[bool], shown: int, size: int) -> tuple[int, int, int]:
    """(first, last, total) of the counted items (flag True) among rows paged by ``size``;
    first and last are 0 when page ``shown`` holds no counted item."""
    before = sum(flags[: (shown - 1) * size])
    on_page = sum(flags[(shown - 1) * size : shown * size])
    if not on_page:
        return 0, 0, sum(flags)
    return before + 1, before + on_page, sum(flags)
