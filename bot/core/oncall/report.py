"""What ``check-config --online`` says of the on-call schedules (SPEC §16): each schedule
read once, each person on call now with the mapping that makes them a Slack user (the
policy's ``people``, their e-mail, or none: named, a warning), or the tool's fault (an
error: the rule's fallback would hold)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.core.oncall.gate import unmapped_name
from bot.core.oncall.roster import OnCallRoster
from bot.providers.oncall import SOURCE_TITLES, OnCallUnavailable

Level = Literal["ok", "warning", "error"]


@dataclass(frozen=True)
class ReportLine:
    level: Level
    text: str


async def oncall_report(roster: OnCallRoster) -> list[ReportLine]:
    """One line per schedule read and per person on call on it."""
    config = roster.config
    if config is None:
        return []
    lines: list[ReportLine] = []
    for name in config.names:
        found = config.schedule(name)
        assert found is not None
        source, schedule_id = found
        where = f"oncall {name} ({SOURCE_TITLES[source]} schedule {schedule_id})"
        try:
            members = await roster.on_call(name)
        except OnCallUnavailable as fault:
            lines.append(ReportLine("error", f"{where}: {fault.detail}"))
            continue
        lines.append(ReportLine("ok", f"{where}: {len(members)} on call now"))
        for member in members:
            who = f"{where}: {unmapped_name(member)}, level {member.level}"
            if member.slack_id is None:
                why = "no Slack user (not in people"
                why += ", no Slack user with their e-mail)" if config.match_by_email else ")"
                lines.append(ReportLine("warning", f"{who}: {why}"))
            else:
                by = "people" if member.mapping == "people" else "e-mail"
                lines.append(ReportLine("ok", f"{who} → <@{member.slack_id}> (by {by})"))
    return lines
