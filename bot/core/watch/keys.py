"""Alert keys: one stable string per message the watcher posts, stored so that a restart
or a failover never posts it again. Each part is percent-quoted, so a ``:`` in an id
cannot make two keys collide."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote


def _part(value: str) -> str:
    return quote(value, safe="")


def remediation_key(project: str, remediation_id: str) -> str:
    """Remediation R of a project was posted."""
    return f"remediation:{_part(project)}:{_part(remediation_id)}"


def incident_key(project: str, cluster_id: str, incident: int) -> str:
    """Cluster C's health incident number N (its root message)."""
    return f"health:{_part(project)}:{_part(cluster_id)}:{incident}"


def recovery_key(project: str, cluster_id: str, incident: int) -> str:
    """The recovery reply of cluster C's incident N."""
    return f"{incident_key(project, cluster_id, incident)}:recovered"


def reminder_key(project: str, cluster_id: str, end_time: datetime, horizon: str) -> str:
    """Cluster C's reminder at horizon H before the reservation end it was sent for (a new
    end time is a new reservation end, with reminders of its own)."""
    end = end_time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"reminder:{_part(project)}:{_part(cluster_id)}:{end}:{_part(horizon)}"
