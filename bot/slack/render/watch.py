"""Block Kit for what the watcher posts first (SPEC §7.1): a remediation awaiting
approval with its buttons, its decided and left-elsewhere versions, thread notes, and the
reject modal; health incidents (root, its edits, the recovery reply). Provider text is
escaped everywhere."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.core.api import RemediationRecord
from bot.core.watch.health import GONE, HealthEvent
from bot.core.watch.notifier import DecisionOutcome, ReservationReminder
from bot.providers.base import ClusterSummary
from bot.providers.descriptor import ProviderDescriptor
from bot.providers.remediations import LinkedAlert, Remediation, xid_summary
from bot.slack.render.clusters import summary_pairs
from bot.slack.render.forms import reason_modal
from bot.slack.render.primitives import (
    Block,
    SlackMessage,
    composed_text,
    context,
    escape,
    fields_section,
    section,
    user_ref,
)

OPEN_UPDATE_FORM = "open_update_form"
OPEN_ACTION_FORM = "open_action_form"
EXTEND_RESERVATION = "extend_reservation"
APPROVE_REMEDIATION = "approve_remediation"
REJECT_REMEDIATION = "reject_remediation"
REJECT_REMEDIATION_CALLBACK = "reject_remediation_modal"

_SEVERITY_ICON = {
    "PHC_SEVERITY_CRITICAL": ":red_circle:",
    "PHC_SEVERITY_HIGH": ":large_orange_circle:",
    "PHC_SEVERITY_MEDIUM": ":large_yellow_circle:",
}
_STATE_ICON = {
    "PENDING": ":hourglass_flowing_sand:",
    "RUNNING": ":gear:",
    "SUCCEEDED": ":white_check_mark:",
    "FAILED": ":x:",
    "CANCELLED": ":no_entry_sign:",
    "AUTO_RESOLVED": ":sparkles:",
}
# How a decision's line begins; {provider} is the provider's title (its descriptor's).
_OUTCOME_HEAD = {
    "approved": ":white_check_mark: Approved",
    "rejected": ":no_entry_sign: Rejected",
    "already_decided": ":information_source: Already decided at {provider}",
    "failed": ":warning: Not sent",
    "unknown": ":grey_question: Sent; {provider}'s answer was lost",
}


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "unknown"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _severity(value: str) -> str:
    name = value.removeprefix("PHC_SEVERITY_").lower() or "unknown"
    return f"{_SEVERITY_ICON.get(value, ':white_circle:')} {escape(name)}"


def _alert_line(alert: LinkedAlert) -> str:
    line = f"{_severity(alert.severity)} *{escape(alert.title)}*"
    if alert.summary_line:
        line += f" — {escape(alert.summary_line)}"
    return line


def _why(remediation: Remediation) -> str:
    lines = [_alert_line(alert) for alert in remediation.linked_alerts[:5]]
    xids = xid_summary(remediation.linked_alerts)
    if xids:
        codes = ", ".join(f"Xid {escape(code)} ({count} times)" for code, count in xids[:10])
        lines.append(f"NVIDIA {codes}")
    if not lines and remediation.reason:
        lines.append(escape(remediation.reason))
    return "\n".join(lines) or "no linked alert"


def _since(remediation: Remediation) -> datetime | None:
    starts = [alert.started_at for alert in remediation.linked_alerts]
    return min(starts) if starts else remediation.create_time


def _headline(record: RemediationRecord, remediation: Remediation, provider: str) -> str:
    return (
        f"Node *{escape(record.node)}* of *{escape(record.cluster_name)}* "
        f"(`{escape(record.cluster_id)}`, {escape(record.project)}): {escape(provider)} "
        f"proposes to *{escape(remediation.mode_text)}*"
    )


def _body(record: RemediationRecord, remediation: Remediation, provider: str) -> list[Block]:
    return [
        section(f":stethoscope: {_headline(record, remediation, provider)}"),
        section(f"*Why*\n{_why(remediation)}"),
        context(
            f"Since {_when(_since(remediation))} · remediation `{escape(remediation.id)}` · "
            f"gpuops `{escape(record.id)}`"
        ),
    ]


def _fallback(record: RemediationRecord, remediation: Remediation, status: str) -> str:
    return escape(
        f"Remediation of {record.node} on {record.cluster_name}: {remediation.mode_text} — {status}"
    )


def remediation_pending(
    record: RemediationRecord, remediation: Remediation, provider: str
) -> SlackMessage:
    """A remediation awaiting a decision, with its buttons (``provider``: who proposes it,
    as its descriptor names it)."""
    buttons: Block = {
        "type": "actions",
        "block_id": f"remediation:{record.id}",
        "elements": [
            _button("Approve", APPROVE_REMEDIATION, record.id, "primary"),
            _button("Reject…", REJECT_REMEDIATION, record.id, "danger"),
        ],
    }
    return SlackMessage(
        text=_fallback(record, remediation, "awaiting approval"),
        blocks=[*_body(record, remediation, provider), buttons],
    )


def remediation_closed(
    record: RemediationRecord, remediation: Remediation, status: str, provider: str
) -> SlackMessage:
    """The message once no decision is wanted any more: ``status`` replaces the buttons
    (composed by us; user ids in it are mentions)."""
    return SlackMessage(
        text=_fallback(record, remediation, "decided"),
        blocks=[*_body(record, remediation, provider), section(status)],
    )


def remediation_decided(
    record: RemediationRecord,
    outcome: DecisionOutcome,
    provider: str,
    remediation: Remediation | None = None,
) -> SlackMessage:
    """The message after a click decided it: the buttons are gone, why it was proposed
    stays (when the provider said), and its thread has more."""
    status = section(decided_status(record, outcome, provider))
    if remediation is not None:
        return SlackMessage(
            text=_fallback(record, remediation, outcome),
            blocks=[*_body(record, remediation, provider), status],
        )
    headline = (
        f":stethoscope: Node *{escape(record.node)}* of *{escape(record.cluster_name)}* "
        f"(`{escape(record.cluster_id)}`, {escape(record.project)}): remediation "
        f"`{escape(record.remediation_id)}`"
    )
    return SlackMessage(
        text=escape(f"Remediation of {record.node} on {record.cluster_name}: {outcome}"),
        blocks=[section(headline), status],
    )


def decided_status(record: RemediationRecord, outcome: DecisionOutcome, provider: str) -> str:
    by = f" by {user_ref(record.decided_by)}" if record.decided_by else ""
    line = f"{_OUTCOME_HEAD[outcome].format(provider=escape(provider))}{by}"
    if record.comment:
        line += f": “{escape(record.comment)}”"
    return line


def elsewhere_status(remediation: Remediation) -> str:
    icon = _STATE_ICON.get(remediation.state, ":information_source:")
    who = f" by {escape(remediation.reviewed_by)}" if remediation.reviewed_by else ""
    return f"{icon} Decided outside gpuops{who}: now *{escape(remediation.state)}*"


def decision_note(
    record: RemediationRecord, outcome: DecisionOutcome, detail: str, provider: str
) -> SlackMessage:
    head = decided_status(record, outcome, provider)
    safe = composed_text(detail)
    return SlackMessage(text=escape(f"{outcome}: {detail}"), blocks=[section(f"{head}\n{safe}")])


def gone_text(provider: str) -> str:
    """What is said of a remediation the provider no longer has."""
    return (
        f"{escape(provider)} no longer has this remediation (it was purged, or its cluster "
        "deleted): nothing is left to decide or follow."
    )


def remediation_gone(record: RemediationRecord, provider: str) -> SlackMessage:
    """The root of a remediation its provider no longer has: the buttons are gone."""
    headline = (
        f":stethoscope: Node *{escape(record.node)}* of *{escape(record.cluster_name)}* "
        f"(`{escape(record.cluster_id)}`, {escape(record.project)}): remediation "
        f"`{escape(record.remediation_id)}`"
    )
    return SlackMessage(
        text=escape(f"Remediation of {record.node} on {record.cluster_name}: gone"),
        blocks=[section(headline), section(f":wastebasket: {gone_text(provider)}")],
    )


def gone_note(provider: str) -> SlackMessage:
    text = gone_text(provider)
    return SlackMessage(text=text, blocks=[section(f":wastebasket: {text}")])


def reopened_note(provider: str) -> SlackMessage:
    text = (
        f"{escape(provider)} still shows it awaiting approval, so the last decision was not taken."
    )
    return SlackMessage(
        text=text, blocks=[section(f":information_source: {text} The buttons are back.")]
    )


_STATE_WORDS = {
    "PENDING_APPROVAL": "is awaiting approval",
    "PENDING": "is about to start",
    "RUNNING": "is running",
    "SUCCEEDED": "succeeded",
    "FAILED": "failed",
    "CANCELLED": "was cancelled",
    "AUTO_RESOLVED": "resolved itself",
    "QUARANTINING": "is quarantining the node",
    "QUARANTINED": "quarantined the node",
}


def progress_words(state: str) -> str:
    """``succeeded``, ``is running``: a remediation's state as the end of a sentence."""
    return _STATE_WORDS.get(state, f"is now {state}")


def progress_note(remediation: Remediation) -> SlackMessage:
    icon = _STATE_ICON.get(remediation.state, ":information_source:")
    words = progress_words(remediation.state)
    line = f"{icon} Remediation *{escape(words)}* ({escape(remediation.state)})"
    if remediation.error_message:
        line += f": {escape(remediation.error_message)}"
    return SlackMessage(text=escape(f"Remediation {words}"), blocks=[section(line)])


def reject_modal(record_id: str, channel: str, thread_ts: str | None) -> Block:
    """Ask why, before rejecting (the provider keeps the comment with the remediation)."""
    return reason_modal(
        REJECT_REMEDIATION_CALLBACK,
        "Reject remediation",
        "Reject",
        {"record": record_id, "channel": channel, "thread_ts": thread_ts},
        None,
        "Why reject it? (kept with the remediation)",
        block_id="comment",
        min_length=3,
    )


def _button(label: str, action_id: str, value: str, style: str) -> Block:
    return {
        "type": "button",
        "text": {"type": "plain_text", "text": label},
        "action_id": action_id,
        "value": value,
        "style": style,
    }


# -- health incidents (SPEC §7.2) -----------------------------------------------------------


def _cluster_name(event: HealthEvent) -> str:
    name = event.summary.name if event.summary is not None else event.cluster_id
    return f"*{escape(name)}* (`{escape(event.cluster_id)}`)"


def _status(status: str) -> str:
    return "no longer listed by its provider" if status == GONE else f"*{escape(status)}*"


def _summary_blocks(summary: ClusterSummary | None) -> list[Block]:
    return [fields_section(summary_pairs(summary)[:10])] if summary is not None else []


def _next_steps(
    project: str, event: HealthEvent, provider: ProviderDescriptor | None
) -> list[Block]:
    """The form that fits the provider: its one action's, or the choice of its actions;
    none when the provider runs no action on a cluster in this status (say so instead)."""
    summary = event.summary
    if summary is None or provider is None:
        return []
    if not provider.acts_on(summary.status):
        return [
            context(
                f"{escape(provider.title)} runs no action on a cluster that is "
                f"{escape(summary.status)}, so none is offered here."
            )
        ]
    value = f"{project}:{event.cluster_id}"
    # The action ids are the stable ones of SPEC; the label is the provider's form title.
    opens = OPEN_UPDATE_FORM if provider.single_action() else OPEN_ACTION_FORM
    button = _button(f"{provider.form_title}…", opens, value, "primary")
    return [{"type": "actions", "block_id": f"incident:{value}", "elements": [button]}]


def _incident_number(event: HealthEvent) -> str:
    """``Incident 2 of this cluster``: the number counts one cluster's incidents (it keys
    the cluster's alerts), so it says so rather than read as a count of the channel's."""
    return f"Incident {event.incident} of this cluster"


def incident_open(
    project: str, event: HealthEvent, provider: ProviderDescriptor | None
) -> SlackMessage:
    """An incident's root while the cluster is unhealthy (posted, then edited on change);
    ``provider`` (the cluster's, None when it is gone) says which form comes next."""
    was = f" (was {escape(event.previous_status)})" if event.previous_status else ""
    line = (
        f":rotating_light: {_cluster_name(event)} in {escape(project)} is "
        f"{_status(event.status)}{was}"
    )
    blocks = [
        section(line),
        *_summary_blocks(event.summary),
        context(f"{_incident_number(event)} · watched by gpuops"),
        *_next_steps(project, event, provider),
    ]
    fallback = f"{event.cluster_id} in {project} is {event.status}"
    return SlackMessage(text=escape(fallback), blocks=blocks)


def incident_closed(project: str, event: HealthEvent) -> SlackMessage:
    """The root once the cluster is healthy again (no buttons; the thread says when)."""
    line = (
        f":white_check_mark: {_cluster_name(event)} in {escape(project)} recovered: "
        f"{_status(event.status)} (was {escape(event.previous_status)})"
    )
    blocks = [section(line), context(f"{_incident_number(event)} · closed")]
    fallback = f"{event.cluster_id} in {project} recovered: {event.status}"
    return SlackMessage(text=escape(fallback), blocks=blocks)


def recovery_note(event: HealthEvent) -> SlackMessage:
    line = f":white_check_mark: Healthy again: {_status(event.status)}"
    return SlackMessage(
        text=escape(f"Healthy again: {event.status}"),
        blocks=[section(line), *_summary_blocks(event.summary)],
    )


# -- reservation reminders (SPEC §7.2) -------------------------------------------------------


def reservation_reminder(reminder: ReservationReminder) -> SlackMessage:
    summary = reminder.summary
    ends = reminder.end_time.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    sentence = f"{summary.name}'s reservation ends {ends}, {reminder.remaining}"
    value = f"{reminder.project}:{summary.cluster_id}"
    blocks: list[Block] = [
        section(f":alarm_clock: {escape(sentence)}"),
        context(
            f"`{escape(summary.cluster_id)}` · {escape(reminder.project)} · "
            f"{escape(reminder.horizon)} reminder"
        ),
        {
            "type": "actions",
            "block_id": f"reminder:{value}",
            "elements": [_button("Extend reservation…", EXTEND_RESERVATION, value, "primary")],
        },
    ]
    return SlackMessage(text=escape(sentence), blocks=blocks)
