"""The lines of a ``/gpu timeline`` file: one audit entry as one inert Markdown line (who,
what, which cluster, the start of its hash), user and provider text escaped."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from bot.core.store import AuditEntry
from bot.core.store.timeline import ChannelEvent

_TEXT_MAX = 600
_MARKDOWN_ACTIVE = re.compile(r"([\\`*_\[\]<>|#~])")
_SPACE = re.compile(r"\s+")
SLACK_USER = re.compile(r"[UW][A-Z0-9]{2,}")
_NAME_MAX = 80
Names = Mapping[str, str]
"""Slack user id → display name, for the people a file names."""


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
    if not SLACK_USER.fullmatch(actor):
        return md(actor)
    name = (names or {}).get(actor)
    return f"{md(name, _NAME_MAX)} (@{actor})" if name else f"@{actor}"


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
        known = {"step", "steps"} <= set(detail)
        step = f" step {detail['step']}/{detail['steps']}" if known else ""
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
