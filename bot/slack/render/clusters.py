"""A cluster as Slack shows it: its card (after a change, with what the provider said)
and the per-project listing, a page at a time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bot.core.api import Page, age_text
from bot.providers.base import ClusterSummary
from bot.slack.render.primitives import (
    _LIST_ROW_MAX,
    _MESSAGE_TEXT_BUDGET,
    _PLAIN_TEXT_MAX,
    Block,
    SlackMessage,
    _button,
    _paged,
    context,
    escape,
    fields_section,
    header,
    notice,
    plain,
    user_ref,
)
from bot.slack.text import shorten, shorten_plain


def summary_pairs(s: ClusterSummary) -> list[tuple[str, str]]:
    """Status and provider/project, then the provider's facts in the order it gave them."""
    pairs: list[tuple[str, str]] = [
        ("Status", escape(s.status) + ("" if s.steady else " (changing)")),
        ("Provider / project", f"{escape(s.provider)} / {escape(s.project)}"),
    ]
    pairs += [(escape(fact.label), escape(fact.value)) for fact in s.facts]
    return pairs


def cluster_summary(
    s: ClusterSummary,
    *,
    requested_by: str | None = None,
    approved_by: str | Sequence[str] | None = None,
    request_id: str | None = None,
    note: str | None = None,
    shown_by: str | None = None,
    revert_id: str | None = None,
    result: SlackMessage | None = None,
) -> SlackMessage:
    """The cluster card; after a change, ``result`` (a thread note: what the provider said)
    comes right under its header and ends its text fallback (a summary always starts with
    the cluster's name and id)."""
    blocks: list[Block] = [header(_titled(s.name, s.cluster_id, _PLAIN_TEXT_MAX))]
    if result is not None:
        blocks += result.blocks
    pairs = summary_pairs(s)
    blocks.append(fields_section(pairs[:10]))
    if len(pairs) > 10:
        blocks.append(fields_section(pairs[10:]))
    who = []
    if request_id:
        who.append(f"request `{escape(request_id)}`")
    if requested_by:
        who.append(f"requested by {user_ref(requested_by)}")
    if approved_by:
        approvers = [approved_by] if isinstance(approved_by, str) else list(approved_by)
        who.append("approved by " + " and ".join(user_ref(u) for u in approvers))
    if shown_by:
        who.append(f"shown for {user_ref(shown_by)}")
    if note:
        who.append(escape(note))
    if who:
        blocks.append(context(" · ".join(who)))
    if revert_id:
        revert = _button("Revert", "revert_request", revert_id, None)
        blocks.append({"type": "actions", "block_id": "revert", "elements": [revert]})
    text = (
        f"{shorten(s.name, 300)} ({escape(s.cluster_id)}) — {shorten(s.status, 100)} · "
        f"{escape(s.provider)}/{escape(s.project)}"
        + (f" · {shorten(s.size, 100)}" if s.size else "")
    )
    if result is not None:
        text += f"\n{result.text}"
    return SlackMessage(text=text, blocks=blocks)


def _titled(name: str, cluster_id: str, limit: int) -> str:
    """``name (id)`` in plain text within ``limit``: the name gives way, the id stays."""
    suffix = f" ({plain(cluster_id)})"
    return shorten_plain(name, max(limit - len(suffix), 1)) + suffix


def cluster_list(
    groups: Mapping[str, Sequence[ClusterSummary] | str],
    page: Page | None = None,
    as_of_seconds: float | None = None,
) -> SlackMessage:
    """Per project, its clusters (or an error text for a project that failed): one page,
    ending with where it sits, the command for the next page and, from a fleet snapshot
    that is not live, how old it is."""
    headers = [f"*{escape(project)}*" for project in groups]
    rows = sum(len(c) if not isinstance(c, str) and c else 1 for c in groups.values())
    room = _MESSAGE_TEXT_BUDGET - sum(len(h) + 1 for h in headers)
    budget = min(_LIST_ROW_MAX, room // max(rows, 1))
    lines: list[str] = []
    for title, content in zip(headers, groups.values(), strict=True):
        lines.append(title)
        if isinstance(content, str):
            lines.append(f":x: {shorten(content, budget - 4)}")
        elif not content:
            lines.append("_no clusters_")
        else:
            lines.extend(_list_row(s, budget) for s in content)
    if not lines:
        return notice("You have no projects you can view here.")
    return _paged(lines, page, age_text(as_of_seconds))


def _list_row(s: ClusterSummary, budget: int) -> str:
    """``• `id` name — status · size · GPU``: the name gives way, the id stays."""
    prefix = f"• `{escape(s.cluster_id)}` "
    suffix = (
        f" — {shorten(s.status, 40)} · {shorten(s.size or '—', 40)}"
        f" · {shorten(s.gpu_type or '—', 40)}"
    )
    return prefix + shorten(s.name, max(budget - len(prefix) - len(suffix), 8)) + suffix
