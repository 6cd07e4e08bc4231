"""Pages of long answers: every item on exactly one page, past the end shows the last page,
and each page says its range, the total and the next command."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bot.core.paging import Page, counted_range, page_of


@given(
    items=st.integers(min_value=0, max_value=300),
    size=st.integers(min_value=1, max_value=50),
)
def test_every_item_is_on_exactly_one_page(items: int, size: int) -> None:
    everything = list(range(items))
    _, count, _ = page_of(everything, 1, size)
    seen = [i for n in range(1, count + 1) for i in page_of(everything, n, size)[2]]
    assert seen == everything
    assert page_of(everything, count + 5, size) == (
        count,
        count,
        page_of(everything, count, size)[2],
    )


def test_counted_range_counts_only_the_counted_rows() -> None:
    flags = [True] * 3 + [False] + [True] * 3  # a project's note between clusters
    assert counted_range(flags, 1, 4) == (1, 3, 6)
    assert counted_range(flags, 2, 4) == (4, 6, 6)
    assert counted_range([False, False], 1, 4) == (0, 0, 0)


def _page(number: int, count: int, asked: int | None = None) -> Page:
    return Page(number, count, 41, 62, 62, "clusters", "/gpu list together-prod", asked)


def test_the_page_line_gives_range_total_and_next_command() -> None:
    assert _page(1, 2).summary == (
        "clusters 41\u201362 of 62 · page 1 of 2 · next: /gpu list together-prod page=2"
    )
    assert _page(2, 2).summary == "clusters 41\u201362 of 62 · page 2 of 2"
    assert _page(2, 2).next_command is None and _page(2, 2).past_end is None
    assert _page(2, 2, asked=9).past_end == (
        "there is no page 9: this answer has 2 pages; here is page 2."
    )
    empty = Page(1, 1, 0, 0, 0, "entries", "/gpu audit")
    assert empty.summary == "0 entries"


def test_a_bounded_total_is_said_as_at_least() -> None:
    page = Page(
        number=1,
        count=1,
        first=1,
        last=20,
        total=20,
        noun="entries",
        command="/gpu audit",
        available=500,
        available_bounded=True,
    )
    assert page.summary.startswith("entries 1\u201320 of the newest 20 (500+ in all)")
