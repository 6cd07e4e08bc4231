"""Together node remediations: typed models after the official SDK and the client for
listing them across a cluster's nodes and approving, rejecting or cancelling one (SPEC §7.1).

    client = RemediationClient(transport)
    pending = await client.list_remediations("tc-h100", states=[RemediationState.PENDING_APPROVAL])
    done = await client.approve(pending[0], comment="approved from #incident by U01ALICE")

Approve, reject and cancel are not idempotent: they go out with ``RetryMode.UNSAFE_WRITE``,
so they are never sent again once Together may have processed them. A refusal saying the
remediation is no longer pending raises ``AlreadyDecided``: someone decided it elsewhere.
Enum-valued fields are plain strings (the known values are the StrEnums below) so that a
value Together adds later is shown as-is instead of breaking the parse.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Protocol, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from bot.providers.errors import (
    AlreadyDecided,
    ProviderError,
    ProviderMalformedReply,
    ProviderRequestError,
    error_for_status,
)
from bot.providers.http import Operation, ProviderTransport, RetryMode, parse_retry_after
from bot.providers.together import PROVIDER, cluster_path, error_message
from bot.providers.together.client import TogetherCalls

ALL_NODES = "-"
DEFAULT_PAGE_SIZE = 100
MAX_PAGES = 50  # 5,000 remediations per listing: a bound against a token that never ends


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


# -- models --------------------------------------------------------------------------------
T = TypeVar("T")


def _none_as_empty(value: Any) -> Any:
    return [] if value is None else value


def _blank_as_none(value: Any) -> Any:
    return None if value == "" else value


NullableList = Annotated[list[T], BeforeValidator(_none_as_empty)]
OptionalTime = Annotated[datetime | None, BeforeValidator(_blank_as_none)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


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


class RemediationPage(_Model):
    remediations: NullableList[Remediation] = Field(default_factory=list)
    has_next: bool = False
    next_page_token: str = ""


# -- "no longer pending" -------------------------------------------------------------------
_NOT_PENDING = re.compile(
    r"pending[_ ]approval|not pending|no longer pending|already (approved|rejected|cancel"
    r"l?ed|decided|resolved|succeeded|failed)|current state|invalid state|state transition",
    re.IGNORECASE,
)


def says_not_pending(status: int, message: str) -> bool:
    """Whether a refused decision means someone decided first (409, or a 400/412 whose
    text is about the remediation's state)."""
    if status == 409:
        return True
    return status in (400, 412) and _NOT_PENDING.search(message) is not None


def remediations_path(cluster_id: str, instance_id: str = ALL_NODES) -> str:
    instance = ALL_NODES if instance_id == ALL_NODES else quote(instance_id, safe="")
    return f"{cluster_path(cluster_id)}/instances/{instance}/remediations"


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


def decision_path(remediation: RemediationAddress, verb: str) -> str:
    base = remediations_path(remediation.cluster_id, remediation.instance_id)
    return f"{base}/{quote(remediation.id, safe='')}/{verb}"


# -- the client ----------------------------------------------------------------------------
class RemediationClient(TogetherCalls):
    """Typed calls to Together's remediation endpoints over a ProviderTransport."""

    def __init__(self, transport: ProviderTransport, page_size: int = DEFAULT_PAGE_SIZE) -> None:
        super().__init__(transport)
        self.page_size = page_size

    async def list_remediations(
        self,
        cluster_id: str,
        *,
        states: Iterable[str] = (),
        instance_id: str = ALL_NODES,
        max_pages: int = MAX_PAGES,
    ) -> list[Remediation]:
        """Every remediation of the cluster (or one node) in ``states`` (all when empty),
        reading every page up to ``max_pages``."""
        if not cluster_id:
            raise self._count(
                Operation.LIST_REMEDIATIONS,
                ProviderRequestError("no cluster id", provider=PROVIDER),
            )
        params: dict[str, Any] = {"page_size": str(self.page_size)}
        wanted = list(states)
        if wanted:
            params["state"] = ",".join(wanted)  # the official SDK's array format
        found: list[Remediation] = []
        for _ in range(max_pages):
            page = await self._page(remediations_path(cluster_id, instance_id), params)
            found.extend(page.remediations)
            if not page.has_next or not page.next_page_token:
                return found
            params["page_token"] = page.next_page_token
        raise self._count(
            Operation.LIST_REMEDIATIONS,
            ProviderMalformedReply(
                f"more than {max_pages} pages of remediations", provider=PROVIDER, status=200
            ),
        )

    async def get(self, cluster_id: str, instance_id: str, remediation_id: str) -> Remediation:
        path = f"{remediations_path(cluster_id, instance_id)}/{quote(remediation_id, safe='')}"
        body = await self._call("GET", path, Operation.GET_REMEDIATION, RetryMode.READ)
        return self._remediation(body, Operation.GET_REMEDIATION, may_have_applied=False)

    async def approve(
        self,
        remediation: RemediationAddress,
        *,
        comment: str | None = None,
        mode: str | None = None,
    ) -> Remediation:
        if mode is not None and mode not in APPROVAL_OVERRIDE_MODES:
            raise ProviderRequestError(
                f"{mode} cannot be set when approving", provider=PROVIDER, status=None
            )
        body: dict[str, str] = {}
        if comment:
            body["comment"] = comment
        if mode:
            body["mode"] = mode
        return await self._decide(remediation, "approve", body)

    async def reject(
        self, remediation: RemediationAddress, *, comment: str | None = None
    ) -> Remediation:
        return await self._decide(remediation, "reject", {"comment": comment} if comment else {})

    async def cancel(self, remediation: RemediationAddress) -> Remediation:
        return await self._decide(remediation, "cancel", None)

    async def aclose(self) -> None:
        await self.transport.aclose()

    # -- internals ----------------------------------------------------------------------
    async def _page(self, path: str, params: Mapping[str, Any]) -> RemediationPage:
        body = await self._call(
            "GET", path, Operation.LIST_REMEDIATIONS, RetryMode.READ, params=params
        )
        try:
            return RemediationPage.model_validate(body)
        except ValidationError as exc:
            raise self._malformed(
                Operation.LIST_REMEDIATIONS, exc, what="a remediation", may_have_applied=False
            ) from None

    async def _decide(
        self, remediation: RemediationAddress, verb: str, body: dict[str, str] | None
    ) -> Remediation:
        operation = Operation.DECIDE_REMEDIATION
        reply = await self._call(
            "POST",
            decision_path(remediation, verb),
            operation,
            RetryMode.UNSAFE_WRITE,
            json_body=body,
        )
        return self._remediation(reply, operation, may_have_applied=True)

    def _status_error(self, response: httpx.Response, *, may_have_applied: bool) -> ProviderError:
        message = error_message(response)
        if says_not_pending(response.status_code, message):
            return AlreadyDecided(message, provider=PROVIDER, status=response.status_code)
        return error_for_status(
            PROVIDER,
            response.status_code,
            message,
            retry_after=parse_retry_after(response.headers.get("Retry-After"), math.inf),
            may_have_applied=may_have_applied,
        )

    def _remediation(
        self, body: Any, operation: Operation, *, may_have_applied: bool
    ) -> Remediation:
        try:
            return Remediation.model_validate(body)
        except ValidationError as exc:
            raise self._malformed(
                operation, exc, what="a remediation", may_have_applied=may_have_applied
            ) from None


def xid_summary(alerts: Sequence[LinkedAlert]) -> list[tuple[str, int]]:
    """Xid codes with their total counts over the alerts, most frequent first."""
    totals: dict[str, int] = {}
    for alert in alerts:
        for event in alert.xid_events:
            totals[event.xid_code] = totals.get(event.xid_code, 0) + event.count
    return sorted(totals.items(), key=lambda item: (-item[1], item[0]))
