"""A change request in its channel: the root message, the approval prompt and what it
becomes once decided, and the notes posted in its thread."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Protocol

from bot.core.api import STATE_WORDS, RequestView, utc_text, when_text
from bot.slack.render.primitives import (
    _SECTION_TEXT_MAX,
    Block,
    SlackMessage,
    _button,
    composed_text,
    context,
    escape,
    section,
    user_ref,
    usergroup_ref,
)
from bot.slack.text import fit_lines, shorten

STATE_ICONS = {
    "pending": ":hourglass_flowing_sand:",
    "approved": ":white_check_mark:",
    "executing": ":gear:",
    "succeeded": ":large_green_circle:",
    "failed": ":red_circle:",
    "unknown": ":warning:",
    "denied": ":no_entry_sign:",
    "expired": ":alarm_clock:",
    "cancelled": ":heavy_multiplication_x:",
}


def _state_line(r: RequestView) -> str:
    icon = STATE_ICONS.get(r.state, "")
    words = STATE_WORDS.get(r.state, r.state)
    if r.awaiting_confirm:
        words = "waiting for its requester to confirm"
    line = f"{icon} *{words}*"
    if r.at_approval:  # it never ran: nobody's approval took effect
        line += f" · {r.at_approval}"
        line += f" · {user_ref(r.decided_by)} pressed Approve" if r.decided_by else ""
    elif r.decided_by and r.state in ("approved", "executing", "succeeded", "failed", "unknown"):
        approvers = list(r.counted) if r.decided_by in r.counted else [r.decided_by]
        who = " and ".join(user_ref(u) for u in approvers)
        line += f" · approved by {who}" if r.needs_approval else ""
    elif r.decided_by and r.state in ("denied", "cancelled"):
        line += f" by {user_ref(r.decided_by)}"
    if r.break_glass or (r.glass_by is not None and r.glass_by in r.approvers):
        line += " · :rotating_light: break glass"
    return line


def request_root(r: RequestView) -> SlackMessage:
    what = "update" if r.action == "update" else f"`{escape(r.action)}`"
    where = f"(`{escape(r.cluster_id)}`, {escape(r.provider)}/{escape(r.project)})"
    asks = f"{user_ref(r.requester)} asks for {what} on "
    name = shorten(r.cluster_name, max(_SECTION_TEXT_MAX - len(asks) - len(where) - 3, 16))
    preview_lines = [f"• `{shorten(line, 300)}`" for line in r.preview] or ["• (no fields)"]
    preview = fit_lines(preview_lines, _SECTION_TEXT_MAX)
    blocks: list[Block] = [section(f"{asks}*{name}* {where}"), section(preview)]
    if r.price_line:
        blocks.append(context(price_text(r.price_line)))
    if r.reason:
        blocks.append(section(f"_Reason:_ {escape(r.reason)}"))
    if r.override:
        blocks.append(context(override_text(r.override)))
    if r.revert_of:
        blocks.append(
            context(f":leftwards_arrow_with_hook: reverts request `{escape(r.revert_of)}`")
        )
    if r.run_at is not None:
        blocks.append(context(f":alarm_clock: {escape(scheduled_words(r))}"))
    if r.via is not None:
        blocks += _agent_blocks(r)
    blocks.append(context(f"{_state_line(r)} · request `{escape(r.id)}`"))
    if r.awaiting_confirm:
        blocks.append(
            {
                "type": "actions",
                "block_id": f"confirm:{r.id}",
                "elements": [
                    _button("Confirm", "confirm_request", r.id, "primary"),
                    _button("Cancel", "cancel_request", r.id, None),
                ],
            }
        )
    if r.plan_progress:
        blocks.append(section(f":stairs: {escape(r.plan_progress)}"))
    if r.plan_buttons:
        steer = [_button(PLAN_LABELS[b], f"plan_{b}", r.id, None) for b in r.plan_buttons]
        blocks.append({"type": "actions", "block_id": "plan", "elements": steer})
    if r.result_message and r.state in ("failed", "unknown", "succeeded"):
        blocks.append(context(escape(r.result_message)))
    text = (
        f"[{STATE_WORDS.get(r.state, r.state)}] {user_ref(r.requester)} asks for "
        f"{escape(r.action)} on {shorten(r.cluster_name, 200)} ({escape(r.cluster_id)}, "
        f"{escape(r.provider)}/{escape(r.project)}): {shorten('; '.join(r.preview), 1500)}"
        f" — {escape(r.id)}" + (f" · {escape(scheduled_words(r))}" if r.run_at is not None else "")
    )
    return SlackMessage(text=text, blocks=blocks)


def _agent_blocks(r: RequestView) -> list[Block]:
    """Who proposed it through what, its fields exactly as the agent gave them, and what
    it waits for (SPEC §15)."""
    client = shorten(r.client or "unnamed client", 100)
    given = " ".join(r.proposed) or "(no fields)"
    blocks: list[Block] = [
        context(f":robot_face: via agent ({escape(client)})"),
        section(f"_The agent proposed, verbatim:_ `{escape(shorten(given, 2000))}`"),
    ]
    if r.awaiting_confirm:
        blocks.append(
            context(
                f"Nothing runs until {user_ref(r.requester)} presses *Confirm*"
                + (", then the approvals it needs." if r.needs_approval else ".")
            )
        )
    return blocks


# The buttons that steer a staged plan (SPEC §14), by what they do: action_id plan_<verb>.
PLAN_LABELS = {
    "pause": "Pause",
    "resume": "Resume",
    "abort": "Abort",
    "revert": "Revert to start",
}


def price_text(line: str) -> str:
    """A change's price line as shown under its preview (escaped)."""
    return f":moneybag: {escape(line)}"


def override_text(override: tuple[str, str, str]) -> str:
    freeze, by, reason = override
    return f":snowflake: freeze *{escape(freeze)}* overridden by {user_ref(by)}: {escape(reason)}"


class Approvals(Protocol):
    """Where a request's approvals stand: a RequestView's, or a Home entry's."""

    @property
    def project(self) -> str: ...
    @property
    def approvers(self) -> tuple[str, ...]: ...
    @property
    def uncounted(self) -> tuple[str, ...]: ...
    @property
    def counted(self) -> tuple[str, ...]: ...
    @property
    def approvals_needed(self) -> int: ...
    @property
    def approval_groups(self) -> tuple[str, ...]: ...
    @property
    def approval_kinds(self) -> tuple[str, ...]: ...
    @property
    def approval_by_rule(self) -> bool: ...
    @property
    def approval_budget(self) -> tuple[str, ...]: ...
    @property
    def glass_by(self) -> str | None: ...


def approval_why(r: Approvals) -> str:
    """``decommission needs 2 approvers from @oncall (approval rule) · 1 of 2: @bob``."""
    kinds = ", ".join(escape(k) for k in r.approval_kinds) or "this change"
    who = "approver" if r.approvals_needed == 1 else "approvers"
    line = f"{kinds} needs {r.approvals_needed} {who}"
    if r.approval_groups:
        line += " from " + " or ".join(usergroup_ref(g) for g in r.approval_groups)
    line += f" ({'approval rule' if r.approval_by_rule else 'default'} of {escape(r.project)})"
    if r.approval_budget:
        figures = "; ".join(escape(f) for f in r.approval_budget)
        line += f", one more past the budget's approval_at: {figures}"
    if r.approvers or r.approvals_needed > 1:
        line += " · " + approval_progress(r)
    return line


def approval_progress(r: Approvals) -> str:
    """``1 of 2: @bob``; after a break glass ``break glass by @alice · 1 of 2: needs 1
    more from @oncall`` (the requester's own approval counts as one, never as all); after
    a reload took approvers' grant away ``0 of 1: none yet (no longer counted: @bob)``."""
    counted = r.counted
    progress = f"{len(counted)} of {r.approvals_needed}"
    gone = f" (no longer counted: {', '.join(user_ref(u) for u in r.uncounted)})"
    gone = gone if r.uncounted else ""
    others = [user_ref(u) for u in counted if u != r.glass_by]
    if r.glass_by is None or r.glass_by not in counted:
        return f"{progress}: {', '.join(others) or 'none yet'}{gone}"
    left = r.approvals_needed - len(counted)
    said = others + ([f"needs {left} more"] if left > 0 else [])
    if left > 0 and r.approval_groups:
        said[-1] += " from " + " or ".join(usergroup_ref(g) for g in r.approval_groups)
    return f"break glass by {user_ref(r.glass_by)} · {progress}: {', '.join(said)}{gone}"


def approval_prompt(r: RequestView, *, expire_minutes: int) -> SlackMessage:
    text = (
        f"Approval needed for {r.id}: an approver of {r.project} other than the requester "
        f"may approve or deny; expires in {expire_minutes} min."
    )
    asked = _asked(r)
    blocks: list[Block] = [
        section(
            f":raised_hand: *Approval needed* for `{escape(r.id)}` — an approver of "
            f"*{escape(r.project)}* other than {user_ref(r.requester)} may approve or deny. "
            f"Expires in {expire_minutes} min.{asked}"
        ),
        context(approval_why(r)),
        *([context(oncall_text(r))] if r.oncall_words else []),
        *([context(price_text(r.price_line))] if r.price_line else []),
        {
            "type": "actions",
            "block_id": "approval",
            "elements": [
                _button("Approve", "approve_request", r.id, "primary"),
                _button("Deny", "deny_request", r.id, "danger"),
                _button("Cancel", "cancel_request", r.id, None),
            ],
        },
    ]
    oncall = f" {composed_text(r.oncall_words, r.oncall_mentions)}." if r.oncall_words else ""
    return SlackMessage(text=f"{escape(text)}{asked} {approval_why(r)}{oncall}", blocks=blocks)


def oncall_text(r: RequestView) -> str:
    """``:pager: on call now: @bob (level 1)`` (SPEC §16), the on-call tool's words escaped."""
    return f":pager: {composed_text(r.oncall_words or '', r.oncall_mentions)}"


def _asked(r: RequestView) -> str:
    """`` Asking <@U02BOB>, <!subteam^S0PLATFORM>.``: the mentions that notify the eligible
    approvers ("" when none is known)."""
    named = [user_ref(u) for u in r.ask_users] + [usergroup_ref(g) for g in r.ask_groups]
    return f" Asking {', '.join(named)}." if named else ""


def approval_closed(r: RequestView) -> SlackMessage:
    """The prompt after a decision: the buttons are gone (but Cancel, while an approved
    scheduled change waits for its time)."""
    blocks: list[Block] = [context(f"Approval for `{escape(r.id)}`: {_state_line(r)}")]
    if r.state == "approved" and r.run_at is not None:
        blocks[0] = context(
            f"Approval for `{escape(r.id)}`: {_state_line(r)} · {escape(scheduled_words(r))}"
        )
        cancel = _button("Cancel", "cancel_request", r.id, None)
        blocks.append({"type": "actions", "block_id": "scheduled", "elements": [cancel]})
    return SlackMessage(
        text=f"Approval for {escape(r.id)}: {STATE_WORDS.get(r.state, r.state)}", blocks=blocks
    )


def scheduled_words(r: RequestView) -> str:
    """``scheduled for 2026-12-01 20:00 UTC, in 3 h`` (or ``… ran at its time``)."""
    assert r.run_at is not None
    if r.state in ("pending", "approved"):
        return f"scheduled for {when_text(r.run_at, datetime.now(UTC))}"
    return f"scheduled for {utc_text(r.run_at)}"


def thread_note(text: str, *, icon: str = "", mentions: Iterable[str] = ()) -> SlackMessage:
    """A note in a request's thread; ``<@id>`` of the given user ids stay mentions."""
    safe = composed_text(text, mentions)
    return SlackMessage(text=safe, blocks=[section(f"{icon} {safe}".strip())])


def rule_changed_note(r: RequestView, also: str | None = None) -> SlackMessage:
    """``The policy was reloaded: scale needs 2 approvers (approval rule of e2e-delhi) · 1
    of 2: @bob.`` — what approving the request takes now, and ``also`` (our text, whose
    mentions of the request's approvers stay mentions)."""
    said = f"The policy was reloaded: {approval_why(r)}"
    if also:
        said += f"; {composed_text(also, r.approvers)}"
    return SlackMessage(text=said + ".", blocks=[section(f":scroll: {said}.")])


def break_glass_note(r: RequestView) -> SlackMessage:
    """The thread's note for a requester's break glass that is one approval of several."""
    text = (
        f":rotating_light: {approval_progress(r)}. Their own request; reason: "
        f"{escape(r.glass_reason or '')}"
    )
    return SlackMessage(text=text, blocks=[section(text)])


def addressed(message: SlackMessage, user: str) -> SlackMessage:
    """``message`` with a mention of ``user`` (a Slack user id we know) before it, so that
    Slack notifies them: a message the bot posts in a thread the bot started notifies
    nobody otherwise."""
    to = user_ref(user)
    rest = list(message.blocks)
    first = rest.pop(0) if rest else section("")
    text = first.get("text", {}) if first.get("type") == "section" else {}
    if text.get("type") == "mrkdwn":
        first = section(f"{to} {text['text']}".strip())
    else:
        rest.insert(0, first)
        first = section(to)
    return SlackMessage(text=f"{to} {message.text}", blocks=[first, *rest])


def decision_note(icon: str, what: str, user: str, detail: str | None = None) -> SlackMessage:
    """``✅ Approved by @bob.`` — a real mention for a Slack user id, the rest escaped."""
    tail = f" {escape(detail)}" if detail else ""
    text = f"{icon} {escape(what)} by {user_ref(user)}.{tail}"
    return SlackMessage(text=text, blocks=[section(text)])
