"""The App Home tab as Block Kit: a pure function of the core's HomeData, within Slack's
limits (100 blocks, 3,000 characters a section, 2,000 a button value), saying what it left
off and where to see it."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime

from bot.core.api import (
    STATE_WORDS,
    HomeBuilder,
    HomeCluster,
    HomeData,
    HomeProject,
    HomeRequest,
    HomeToken,
    age_text,
    when_text,
)
from bot.slack.messenger import Messenger, SlackDeliveryError
from bot.slack.render.primitives import (
    Block,
    channel_ref,
    context,
    escape,
    header,
    plain,
    section,
    user_ref,
)
from bot.slack.render.requests import STATE_ICONS, approval_why, price_text

log = logging.getLogger(__name__)

MAX_BLOCKS = 100
BUTTON_VALUE_MAX = 2000
SHOW_ACTION_ID = "home_show_cluster"
REVOKE_TOKEN_ACTION_ID = "revoke_token"  # noqa: S105 - an action_id, not a secret
_TOKENS_SHOWN = 5
NO_PROJECTS = (
    "No projects here: the Home tab lists the projects whose grant holds in every channel "
    "(a grant scoped to channels is used there, with `/gpu list`)."
)
# Entries shown per request list. With their titles, notes, the tab's title and dividers
# the request lists take at most 42 blocks; the clusters get the rest of the 100.
_ENTRY_LIMITS = {"approvals": 10, "open": 10}


def _button(label: str, action_id: str, value: str, style: str | None = None) -> Block:
    button: Block = {
        "type": "button",
        "text": {"type": "plain_text", "text": plain(label)},
        "action_id": action_id,
        "value": value,
    }
    if style is not None:
        button["style"] = style
    return button


def _divider() -> Block:
    return {"type": "divider"}


def _state(request: HomeRequest) -> str:
    icon = STATE_ICONS.get(request.state, "")
    return f"{icon} {STATE_WORDS.get(request.state, escape(request.state))}".strip()


def _request_text(request: HomeRequest, *, by: bool) -> str:
    what = "update" if request.action == "update" else f"`{escape(request.action)}`"
    head = (
        f"{what} on *{escape(request.cluster_name)}* (`{escape(request.cluster_id)}`, "
        f"{escape(request.project)}) · {_state(request)} · `{escape(request.id)}`"
    )
    if by:
        head += f"\nasked by {user_ref(request.requester)} in {channel_ref(request.channel)}"
    lines = [head, *(f"• `{escape(line)}`" for line in request.preview)]
    if request.price_line:
        lines.append(price_text(request.price_line))
    if request.reason:
        lines.append(f"_Reason:_ {escape(request.reason)}")
    if request.run_at is not None and request.state in ("pending", "approved"):
        when = when_text(request.run_at, datetime.now(UTC))
        lines.append(f":alarm_clock: scheduled for {escape(when)}")
    if request.state == "pending" and (request.approvers or request.approvals_needed > 1):
        lines.append(approval_why(request))  # "… needs 2 approvers … · 1 of 2: @bob"
    return "\n".join(lines)


def _more(shown: int, total: int, where: str, *, bounded: bool = False) -> list[Block]:
    if total <= shown:
        return []
    more = f"{total - shown}{'+' if bounded else ''}"
    return [context(f"{more} more not shown here — {where}")]


def _approval_blocks(data: HomeData) -> list[Block]:
    blocks: list[Block] = [
        section(f"*:raised_hand: Waiting for your approval* ({data.approvals_total})")
    ]
    shown = data.approvals[: _ENTRY_LIMITS["approvals"]]
    if not shown and not data.approvals_more_possible:
        blocks.append(context("Nothing is waiting for you."))
    for request in shown:
        blocks.append(section(_request_text(request, by=True)))
        blocks.append(
            {
                "type": "actions",
                "block_id": f"home_decide:{request.id}",
                "elements": [
                    _button("Approve", "approve_request", request.id, "primary"),
                    _button("Deny", "deny_request", request.id, "danger"),
                ],
            }
        )
    where = "open them from their threads"
    if data.approval_channels:
        where += " in " + ", ".join(channel_ref(c) for c in data.approval_channels)
    blocks += _more(len(shown), data.approvals_total, where)
    if data.approvals_more_possible:
        blocks.append(context("More requests are pending than this tab reads at once."))
    return blocks


def _open_blocks(data: HomeData) -> list[Block]:
    blocks: list[Block] = [
        section(
            f"*:hourglass_flowing_sand: Your open requests* "
            f"({data.open_total}{'+' if data.open_total_bounded else ''})"
        )
    ]
    shown = data.open_requests[: _ENTRY_LIMITS["open"]]
    if not shown:
        blocks.append(context("You have no open requests."))
    for request in shown:
        block = section(_request_text(request, by=False))
        block["block_id"] = f"home_open:{request.id}"
        if request.state == "pending" or (request.state == "approved" and request.run_at):
            block["accessory"] = _button("Cancel", "cancel_request", request.id)
        blocks.append(block)
    blocks += _more(
        len(shown), data.open_total, "they are in their threads", bounded=data.open_total_bounded
    )
    return blocks


def _recent_line(request: HomeRequest) -> str:
    line = (
        f"{_state(request)} `{escape(request.action)}` on *{escape(request.cluster_name)}* "
        f"({escape(request.project)}) · `{escape(request.id)}`"
    )
    if request.result_message:
        line += f" — {escape(request.result_message[:200])}"
    return line


def _recent_blocks(data: HomeData) -> list[Block]:
    counted = f"{data.recent_total}{'+' if data.recent_total_bounded else ''}"
    blocks: list[Block] = [section(f"*:clipboard: Your recent results* ({counted})")]
    if not data.recent:
        blocks.append(context("No finished requests yet."))
        return blocks
    # One section holds every line; it is clipped line by line, never mid-line.
    lines: list[str] = []
    used = 0
    for request in data.recent:
        line = _recent_line(request)
        if used + len(line) + 1 > 2900:
            break
        lines.append(line)
        used += len(line) + 1
    blocks.append(section("\n".join(lines)))
    blocks += _more(
        len(lines),
        data.recent_total,
        "`/gpu audit` has the full record",
        bounded=data.recent_total_bounded,
    )
    return blocks


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _token_block(token: HomeToken) -> Block:
    used = (
        f"last used {_when(token.last_used_at)}"
        + (f" by {escape(token.last_client)}" if token.last_client else "")
        if token.last_used_at
        else "never used"
    )
    block = section(f"`{escape(token.name)}` — valid until {_when(token.expires_at)} · {used}")
    block["block_id"] = f"home_token:{token.name}"[:255]
    block["accessory"] = _button("Revoke", REVOKE_TOKEN_ACTION_ID, token.name, "danger")
    return block


def _token_blocks(data: HomeData) -> list[Block]:
    """The person's live tokens for agents, each with Revoke (SPEC §15)."""
    if not data.tokens:
        return []
    blocks: list[Block] = [section(f"*:key: Your agent tokens* ({len(data.tokens)})")]
    blocks += [_token_block(t) for t in data.tokens[:_TOKENS_SHOWN]]
    blocks += _more(min(len(data.tokens), _TOKENS_SHOWN), len(data.tokens), "`/gpu token list`")
    return [*blocks, _divider()]


def _cluster_block(project: str, cluster: HomeCluster) -> Block:
    gpu = f" · {escape(cluster.gpu_type)}" if cluster.gpu_type else ""
    icon = ":large_green_circle:" if cluster.steady else ":large_yellow_circle:"
    block = section(
        f"{icon} *{escape(cluster.name)}* (`{escape(cluster.cluster_id)}`) — "
        f"{escape(cluster.status)} · {escape(cluster.size)}{gpu}"
    )
    value = f"{project}:{cluster.cluster_id}"
    if len(value) <= BUTTON_VALUE_MAX:
        block["accessory"] = _button("Show", SHOW_ACTION_ID, value)
    return block


def _project_blocks(project: HomeProject, budget: int) -> list[Block]:
    """A project's header, as many clusters as the budget allows, and what was left off."""
    title = f"*{escape(project.name)}* ({escape(project.provider)})"
    as_of = age_text(project.as_of_seconds)
    if as_of is not None:  # from a fleet snapshot that is not live
        title += f" · _{escape(as_of)}_"
    if project.error is not None:
        return [section(title), context(f":x: {escape(project.error)}")]
    if not project.clusters:
        return [section(title), context("no clusters")]
    room = max(0, budget - 2)  # the header and a possible overflow note
    shown = project.clusters[:room]
    blocks = [section(title), *(_cluster_block(project.name, c) for c in shown)]
    where = f"see them all with `/gpu list {escape(project.name)}`"
    return blocks + _more(len(shown), project.total_clusters, where)


def _projects_blocks(projects: Sequence[HomeProject], budget: int) -> list[Block]:
    blocks: list[Block] = [section("*:desktop_computer: Your clusters*")]
    if not projects:
        blocks.append(context(NO_PROJECTS))
        return blocks
    budget -= len(blocks) + 1  # keep one block for "N more projects"
    for index, project in enumerate(projects):
        if budget < 3:
            names = ", ".join(f"`{escape(p.name)}`" for p in projects[index:])
            blocks.append(
                context(
                    f"{len(projects) - index} more projects not shown here — "
                    f"see them with `/gpu list <project>`: {names}"
                )
            )
            break
        project_blocks = _project_blocks(project, budget)
        blocks += project_blocks
        budget -= len(project_blocks)
    return blocks


def home_view(data: HomeData) -> Block:
    """The ``home`` view to publish for ``data.user``."""
    blocks: list[Block] = [header("gpuops")]
    if data.requests_error is not None:
        blocks.append(section(f":warning: {escape(data.requests_error)}"))
    else:
        blocks += _approval_blocks(data)
        blocks.append(_divider())
        blocks += _open_blocks(data)
        blocks.append(_divider())
        blocks += _recent_blocks(data)
        blocks.append(_divider())
        blocks += _token_blocks(data)
    if blocks[-1] != _divider():
        blocks.append(_divider())
    blocks += _projects_blocks(data.projects, MAX_BLOCKS - len(blocks))
    return {"type": "home", "blocks": blocks}


class HomePublisher:
    """Builds a person's Home data and publishes it as their App Home tab, with the hash of
    the tab it last published for them: when the tab changed since (another replica
    published it), Slack answers ``hash_conflict`` and the tab is built again from the data
    as it is now and published once more, over whatever is there."""

    def __init__(
        self, builder: HomeBuilder, messenger: Messenger, *, hashes_kept: int = 10_000
    ) -> None:
        self.builder = builder
        self.messenger = messenger
        self._hashes_kept = hashes_kept
        self._hashes: OrderedDict[str, str] = OrderedDict()

    async def publish(self, user: str) -> None:
        """Raises SlackDeliveryError when Slack refuses it (the refresher counts that)."""
        data = await self.builder.build(user)
        try:
            fresh = await self.messenger.publish_home(
                user, home_view(data), hash=self._hashes.get(user)
            )
        except SlackDeliveryError as exc:
            if exc.code != "hash_conflict":
                raise
            log.info("home: the tab of %s changed since it was published here; rebuilt", user)
            # No hash: Slack gives no way to read the current one, and this is the latest data.
            data = await self.builder.build(user)
            fresh = await self.messenger.publish_home(user, home_view(data))
        self._remember(user, fresh)

    def _remember(self, user: str, hash: str) -> None:
        self._hashes[user] = hash
        self._hashes.move_to_end(user)
        while len(self._hashes) > self._hashes_kept:
            self._hashes.popitem(last=False)
