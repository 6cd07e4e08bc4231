"""The node-remediation capability's models (SPEC §7.1): a remediation a provider proposes
for a node, the alerts behind it, and how a decision names one. Together's wire shape is the
first to fill them; any provider offering remediations parses its replies into these."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from bot.providers.lenient import NullableList, OptionalTime


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class RemediationState(enum.StrEnum):
    PENDING_APPROVAL = "PENDING_APPROVAL"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    AUTO_RESOLVED = "AUTO_RESOLVED"
    QUARANTINING = "QUARANTINING"
    QUARANTINED = "QUARANTINED"


FINAL_STATES = frozenset(
    {
        RemediationState.SUCCEEDED,
        RemediationState.FAILED,
        RemediationState.CANCELLED,
        RemediationState.AUTO_RESOLVED,
    }
)


class RemediationMode(enum.StrEnum):
    VM_ONLY = "REMEDIATION_MODE_VM_ONLY"
    HOST_AWARE = "REMEDIATION_MODE_HOST_AWARE"
    EVICT_WITHOUT_REPLACEMENT = "REMEDIATION_MODE_EVICT_WITHOUT_REPLACEMENT"
    REBOOT_VM = "REMEDIATION_MODE_REBOOT_VM"
    HOST_POWER_CYCLE = "REMEDIATION_MODE_HOST_POWER_CYCLE"


# "This mode cannot be set as an approval override" (the SDK's approve docstring).
APPROVAL_OVERRIDE_MODES = frozenset(set(RemediationMode) - {RemediationMode.HOST_POWER_CYCLE})

MODE_TEXT: dict[str, str] = {
    RemediationMode.VM_ONLY: "replace the VM on any host",
    RemediationMode.HOST_AWARE: "cordon the host and replace the VM on another host",
    RemediationMode.EVICT_WITHOUT_REPLACEMENT: "evict the VM without a replacement",
    RemediationMode.REBOOT_VM: "reboot the VM in place",
    RemediationMode.HOST_POWER_CYCLE: "cordon and power-cycle the host",
}


class RemediationTrigger(enum.StrEnum):
    MANUAL = "REMEDIATION_TRIGGER_MANUAL"
    AUTOMATED = "REMEDIATION_TRIGGER_AUTOMATED"


class AlertSeverity(enum.StrEnum):
    INFO = "PHC_SEVERITY_INFO"
    WARNING = "PHC_SEVERITY_WARNING"
    CRITICAL = "PHC_SEVERITY_CRITICAL"


class XidEvent(_Model):
    """One NVIDIA Xid code seen in the alert window."""

    xid_code: str
    count: int = 0
    mnemonic: str = ""


class XidDetails(_Model):
    events: NullableList[XidEvent] = Field(default_factory=list)


class SlurmNodeUnavailable(_Model):
    reason: str = ""


class AlertAnnotation(_Model):
    """The typed content Together parses from a health check alert's annotations."""

    title: str = ""
    summary_line: str = ""
    description: str = ""
    xid: XidDetails | None = None
    slurm_node_unavailable: SlurmNodeUnavailable | None = None


class LinkedAlert(_Model):
    """A passive health check alert linked to a remediation."""

    alert_name: str
    cluster_id: str
    passive_health_check_alert_id: str
    severity: str
    started_at: datetime
    target_vm: str
    annotation: AlertAnnotation | None = None
    annotations: dict[str, str] = Field(default_factory=dict)
    instance_id: str | None = None
    node_remediation_intent_id: str | None = None
    resolved_at: OptionalTime = None

    @property
    def title(self) -> str:
        if self.annotation is not None and self.annotation.title:
            return self.annotation.title
        return self.annotations.get("summary") or self.alert_name

    @property
    def summary_line(self) -> str:
        if self.annotation is not None and self.annotation.summary_line:
            return self.annotation.summary_line
        return self.annotations.get("evidence", "")

    @property
    def xid_events(self) -> list[XidEvent]:
        if self.annotation is None or self.annotation.xid is None:
            return []
        return self.annotation.xid.events


class Remediation(_Model):
    """A node remediation (an instance may have several over time)."""

    id: str
    cluster_id: str
    instance_id: str
    mode: str
    state: str
    trigger: str
    active_health_check_run_id: str | None = None
    create_time: OptionalTime = None
    end_time: OptionalTime = None
    error_message: str | None = None
    instance_name: str | None = None
    linked_alerts: NullableList[LinkedAlert] = Field(default_factory=list)
    passive_health_check_event_id: str | None = None
    reason: str | None = None
    requested_by: str | None = None
    review_comment: str | None = None
    review_time: OptionalTime = None
    reviewed_by: str | None = None
    start_time: OptionalTime = None
    update_time: OptionalTime = None

    @property
    def node(self) -> str:
        return self.instance_name or self.instance_id

    @property
    def awaiting_approval(self) -> bool:
        return self.state == RemediationState.PENDING_APPROVAL

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def mode_text(self) -> str:
        return MODE_TEXT.get(self.mode, self.mode)


class RemediationAddress(Protocol):
    """What a decision call needs to name a remediation (a Remediation has it, and so does
    a stored reference to one)."""

    @property
    def id(self) -> str: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def instance_id(self) -> str: ...


@dataclass(frozen=True)
class RemediationRef:
    id: str
    cluster_id: str
    instance_id: str


def xid_summary(alerts: Sequence[LinkedAlert]) -> list[tuple[str, int]]:
    """Xid codes with their total counts over the alerts, most frequent first."""
    totals: dict[str, int] = {}
    for alert in alerts:
        for event in alert.xid_events:
            totals[event.xid_code] = totals.get(event.xid_code, 0) + event.count
    return sorted(totals.items(), key=lambda item: (-item[1], item[0]))
