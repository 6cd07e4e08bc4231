"""Node remediations for the Together simulator (SPEC §7.3): Together's list across nodes
(``-``), state filter, token pagination, approve / reject / cancel with Together's error
shape, linked health check alerts, and states that move over a few seconds.

An approved remediation goes ``PENDING → RUNNING → SUCCEEDED`` (or ``FAILED`` when created
so) evenly over ``run_seconds``, worked out from the elapsed time whenever it is read, as
the official SDK documents; a rejected one becomes ``CANCELLED`` with the review fields set.
"""

from __future__ import annotations

import copy
import itertools
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

PENDING_APPROVAL = "PENDING_APPROVAL"
DEFAULT_PAGE_SIZE = 50
_RUN_STEPS = ("PENDING", "RUNNING")
DECIDABLE: dict[str, frozenset[str]] = {  # verb → the states it is allowed from
    "approve": frozenset({PENDING_APPROVAL}),
    "reject": frozenset({PENDING_APPROVAL}),
    "cancel": frozenset({PENDING_APPROVAL, "PENDING"}),
}
SIM_REVIEWER = "user@together.sim"
APPROVAL_MODES = frozenset(
    {
        "REMEDIATION_MODE_VM_ONLY",
        "REMEDIATION_MODE_HOST_AWARE",
        "REMEDIATION_MODE_EVICT_WITHOUT_REPLACEMENT",
        "REMEDIATION_MODE_REBOOT_VM",
        "REMEDIATION_MODE_HOST_POWER_CYCLE",
    }
)

XID_MNEMONICS = {
    "48": "DBE (Double Bit ECC Error)",
    "63": "ECC page retirement or row remapping recording event",
    "74": "NVLINK Error",
    "79": "GPU has fallen off the bus",
    "94": "Contained ECC error",
    "95": "Uncontained ECC error",
}


def _ts(value: datetime) -> str:
    return value.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


class NewRemediation(BaseModel):
    """The body of ``POST /_sim/clusters/{cluster_id}/remediations``."""

    node: int = 0  # index into the cluster's gpu_worker_nodes
    mode: str = "REMEDIATION_MODE_HOST_AWARE"
    xid: dict[str, int] = Field(default_factory=lambda: {"79": 3})  # Xid code → count
    severity: str = "PHC_SEVERITY_CRITICAL"
    outcome: str = "SUCCEEDED"  # where an approval ends: SUCCEEDED or FAILED
    remediation_id: str | None = None


class Resolution(BaseModel):
    """The body of ``POST /_sim/remediations/{id}/resolve``: decided outside gpuops."""

    state: str = "AUTO_RESOLVED"  # or CANCELLED, or PENDING (approved in the console)
    reviewed_by: str = SIM_REVIEWER


class DecisionRefused(Exception):
    def __init__(self, status: int, message: str, code: str) -> None:
        self.status = status
        self.message = message
        self.code = code
        super().__init__(message)


@dataclass
class _Run:
    started: float  # time.monotonic() at approval
    outcome: str
    reached: int = -1


@dataclass
class RemediationDesk:
    """The remediations of every simulated cluster."""

    run_seconds: float = 3.0
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    _runs: dict[str, _Run] = field(default_factory=dict)
    _outcomes: dict[str, str] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def clear(self) -> None:
        self.items.clear()
        self._runs.clear()
        self._outcomes.clear()
        self._ids = itertools.count(1)

    # -- creation -----------------------------------------------------------------------
    def create(self, cluster: dict[str, Any], spec: NewRemediation) -> dict[str, Any]:
        nodes = cluster.get("gpu_worker_nodes") or []
        if not 0 <= spec.node < len(nodes):
            raise DecisionRefused(400, f"cluster has no node {spec.node}", "invalid_parameter")
        node = nodes[spec.node]
        remediation_id = spec.remediation_id or f"rem-{next(self._ids):04d}"
        now = datetime.now(UTC)
        item: dict[str, Any] = {
            "id": remediation_id,
            "cluster_id": cluster["cluster_id"],
            "instance_id": node["instance_id"],
            "instance_name": node["host_name"],
            "mode": spec.mode,
            "state": PENDING_APPROVAL,
            "trigger": "REMEDIATION_TRIGGER_AUTOMATED",
            "create_time": _ts(now),
            "update_time": _ts(now),
            "passive_health_check_event_id": f"phc-event-{remediation_id}",
            "requested_by": "passive-health-check",
            "linked_alerts": [self._alert(cluster, node, remediation_id, spec, now)],
        }
        self.items[remediation_id] = item
        self._outcomes[remediation_id] = spec.outcome
        return copy.deepcopy(item)

    @staticmethod
    def _alert(
        cluster: dict[str, Any],
        node: dict[str, Any],
        remediation_id: str,
        spec: NewRemediation,
        now: datetime,
    ) -> dict[str, Any]:
        events = [
            {"xid_code": code, "count": count, "mnemonic": XID_MNEMONICS.get(code, "")}
            for code, count in spec.xid.items()
        ]
        codes = ", ".join(f"Xid {e['xid_code']} x{e['count']}" for e in events)
        title = "GPU Xid error" if events else "Slurm node unavailable"
        summary = f"{node['host_name']}: {codes}" if events else f"{node['host_name']} drained"
        annotation: dict[str, Any] = {
            "title": title,
            "summary_line": summary,
            "description": "NVIDIA driver reported Xid errors in dmesg.",
        }
        if events:
            annotation["xid"] = {"events": events}
        else:
            annotation["slurm_node_unavailable"] = {"reason": "Not responding"}
        return {
            "alert_name": "DmesgXidError" if events else "SlurmNodeUnavailable",
            "annotation": annotation,
            "annotations": {"summary": title, "evidence": summary},
            "cluster_id": cluster["cluster_id"],
            "passive_health_check_alert_id": f"phc-alert-{remediation_id}",
            "severity": spec.severity,
            "started_at": _ts(now),
            "target_vm": node["host_name"],
            "instance_id": node["instance_id"],
            "node_remediation_intent_id": remediation_id,
        }

    # -- reads --------------------------------------------------------------------------
    def view(self, remediation_id: str) -> dict[str, Any]:
        self._advance(remediation_id)
        return copy.deepcopy(self.items[remediation_id])

    def find(self, cluster_id: str, instance_id: str, remediation_id: str) -> dict[str, Any] | None:
        item = self.items.get(remediation_id)
        if item is None or item["cluster_id"] != cluster_id:
            return None
        if instance_id != "-" and item["instance_id"] != instance_id:
            return None
        return item

    def page(
        self,
        cluster_id: str,
        instance_id: str,
        states: set[str],
        page_size: int,
        page_token: str,
    ) -> dict[str, Any]:
        """One page of the listing; ``page_token`` is an opaque offset."""
        matching = []
        for remediation_id, item in self.items.items():
            if item["cluster_id"] != cluster_id:
                continue
            if instance_id != "-" and item["instance_id"] != instance_id:
                continue
            current = self.view(remediation_id)
            if not states or current["state"] in states:
                matching.append(current)
        start = _offset(page_token)
        chunk = matching[start : start + page_size]
        more = start + page_size < len(matching)
        return {
            "remediations": chunk,
            "has_next": more,
            "next_page_token": _token(start + page_size) if more else "",
        }

    # -- decisions ----------------------------------------------------------------------
    def decide(self, item: dict[str, Any], verb: str, body: Any) -> dict[str, Any]:
        remediation_id = item["id"]
        self._advance(remediation_id)
        if item["state"] not in DECIDABLE[verb]:
            allowed = " or ".join(sorted(DECIDABLE[verb]))
            raise DecisionRefused(
                400,
                f"remediation {remediation_id} is in state {item['state']}; "
                f"only {allowed} remediations can be {_past(verb)}",
                "failed_precondition",
            )
        fields = body if isinstance(body, dict) else {}
        now = _ts(datetime.now(UTC))
        if verb == "approve":
            _check_override(fields.get("mode"))
            if fields.get("mode"):
                item["mode"] = fields["mode"]
            self._review(item, fields.get("comment"), now)
            self._start(remediation_id)
        elif verb == "reject":
            self._review(item, fields.get("comment"), now)
            self._finish(item, "CANCELLED", now)
        else:
            self._runs.pop(remediation_id, None)
            self._finish(item, "CANCELLED", now)
        return self.view(remediation_id)

    def resolve(self, remediation_id: str, resolution: Resolution) -> dict[str, Any]:
        """Decide a remediation "elsewhere" (Together's console or its own checks)."""
        item = self.items[remediation_id]
        now = _ts(datetime.now(UTC))
        if resolution.state == "PENDING":
            item["reviewed_by"] = resolution.reviewed_by
            item["review_time"] = now
            self._start(remediation_id)
        else:
            self._runs.pop(remediation_id, None)
            self._finish(item, resolution.state, now)
        return self.view(remediation_id)

    @staticmethod
    def _review(item: dict[str, Any], comment: Any, now: str) -> None:
        item["reviewed_by"] = SIM_REVIEWER
        item["review_time"] = now
        if isinstance(comment, str) and comment:
            item["review_comment"] = comment

    def _start(self, remediation_id: str) -> None:
        item = self.items[remediation_id]
        item["state"] = "PENDING"
        item["update_time"] = _ts(datetime.now(UTC))
        outcome = self._outcomes.get(remediation_id, "SUCCEEDED")
        self._runs[remediation_id] = _Run(time.monotonic(), outcome, reached=0)

    @staticmethod
    def _finish(item: dict[str, Any], state: str, now: str) -> None:
        item["state"] = state
        item["end_time"] = now
        item["update_time"] = now

    def _advance(self, remediation_id: str) -> None:
        run = self._runs.get(remediation_id)
        if run is None:
            return
        item = self.items[remediation_id]
        step = self.run_seconds / len(_RUN_STEPS)
        elapsed = time.monotonic() - run.started
        index = len(_RUN_STEPS) if step <= 0 else min(int(elapsed / step), len(_RUN_STEPS))
        now = _ts(datetime.now(UTC))
        if index >= 1 and run.reached < 1:
            item["state"] = "RUNNING"
            item["start_time"] = now
            item["update_time"] = now
        if index >= len(_RUN_STEPS):
            if run.outcome == "FAILED":
                item["error_message"] = "replacement VM failed its acceptance checks"
            self._finish(item, run.outcome, now)
            del self._runs[remediation_id]
            return
        run.reached = index


def _check_override(mode: Any) -> None:
    if mode is None:
        return
    if mode not in APPROVAL_MODES:
        raise DecisionRefused(400, f"mode {mode!r} is not a remediation mode", "invalid_parameter")
    if mode == "REMEDIATION_MODE_HOST_POWER_CYCLE":
        raise DecisionRefused(
            400,
            "REMEDIATION_MODE_HOST_POWER_CYCLE cannot be set as an approval override",
            "invalid_parameter",
        )


def _past(verb: str) -> str:
    return {"approve": "approved", "reject": "rejected", "cancel": "cancelled"}[verb]


def _token(offset: int) -> str:
    return f"o{offset}"


def _offset(token: str) -> int:
    if not token:
        return 0
    if not token.startswith("o") or not token[1:].isdigit():
        raise DecisionRefused(400, "invalid page_token", "invalid_parameter")
    return int(token[1:])


def requested_states(values: list[str]) -> set[str]:
    """The ``state`` filter, given repeated (``state=A&state=B``) or comma-joined, as the
    official SDK sends it."""
    return {part for value in values for part in value.split(",") if part}
