"""Together AI Instant Clusters: typed models, the HTTP client, the update rules
(SPEC §1.1) and the provider-neutral adapter.

    transport = build_together_transport(api_key, base_url, ClientSettings())
    adapter = TogetherAdapter(TogetherClient(transport, project_id="proj-123"), "ml-prod")
    state = await adapter.get_cluster("tc-h100-reserved")
    plan = adapter.plan(state, "update", {"num_gpus": "24"})
    outcome = await adapter.apply(plan)

Enum-valued fields of the API are parsed as plain strings (the known values are the StrEnums
below) so that a status, GPU type or phase Together adds later is shown as-is instead of
breaking the parse.
"""

from __future__ import annotations

import enum
import http
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)

from bot.metrics import PROVIDER_ERRORS
from bot.providers.base import (
    ApplyOutcome,
    ChangeInputError,
    ChangePlan,
    ClusterState,
    ClusterSummary,
    FieldSpec,
    PreviewLine,
    ProviderName,
)
from bot.providers.errors import (
    ProviderError,
    ProviderMalformedReply,
    ProviderNotFound,
    ProviderRequestError,
    RuleViolation,
    error_for_status,
)
from bot.providers.http import ClientSettings, ProviderTransport, RetryMode, parse_retry_after

PROVIDER = "together"
GPUS_PER_NODE = 8
_MESSAGE_LIMIT = 500


# -- known enum values (the API may send others) -------------------------------------------
class ClusterType(enum.StrEnum):
    KUBERNETES = "KUBERNETES"
    SLURM = "SLURM"


class BillingType(enum.StrEnum):
    RESERVED = "RESERVED"
    ON_DEMAND = "ON_DEMAND"
    SCHEDULED_CAPACITY = "SCHEDULED_CAPACITY"


class ClusterStatus(enum.StrEnum):
    WAITING_FOR_CONTROL_PLANE_NODES = "WaitingForControlPlaneNodes"
    WAITING_FOR_DATA_PLANE_NODES = "WaitingForDataPlaneNodes"
    WAITING_FOR_SUBNET = "WaitingForSubnet"
    WAITING_FOR_SHARED_VOLUME = "WaitingForSharedVolume"
    INSTALLING_DRIVERS = "InstallingDrivers"
    RUNNING_ACCEPTANCE_TESTS = "RunningAcceptanceTests"
    PAUSED = "Paused"
    ON_DEMAND_COMPUTE_PAUSED = "OnDemandComputePaused"
    READY = "Ready"
    DEGRADED = "Degraded"
    DELETING = "Deleting"


STEADY_STATUSES: frozenset[str] = frozenset(
    {
        ClusterStatus.READY,
        ClusterStatus.DEGRADED,
        ClusterStatus.PAUSED,
        ClusterStatus.ON_DEMAND_COMPUTE_PAUSED,
    }
)
PREPAID_BILLING: frozenset[str] = frozenset({BillingType.RESERVED, BillingType.SCHEDULED_CAPACITY})

# The settable fields, in the order previews and modals show them.
UPDATE_FIELDS: tuple[str, ...] = (
    "cluster_type",
    "num_gpus",
    "num_reserved_gpus",
    "num_preemptible_gpus",
    "num_capacity_pool_gpus",
    "reservation_end_time",
)
_INT_FIELDS: tuple[str, ...] = (
    "num_gpus",
    "num_reserved_gpus",
    "num_preemptible_gpus",
    "num_capacity_pool_gpus",
)
# Update field → the Cluster field that holds its current value.
_CURRENT_SOURCE: dict[str, str] = {
    "cluster_type": "cluster_type",
    "num_gpus": "num_gpus",
    "num_reserved_gpus": "num_reserved_gpus",
    "num_preemptible_gpus": "desired_preemptible_gpus",
    "num_capacity_pool_gpus": "num_capacity_pool_gpus",
    "reservation_end_time": "reservation_end_time",
}


# -- lenient parsing helpers ---------------------------------------------------------------
T = TypeVar("T")


def _none_as_empty(value: Any) -> Any:
    # Go services marshal an empty slice as null.
    return [] if value is None else value


def _blank_as_none(value: Any) -> Any:
    return None if value == "" else value


NullableList = Annotated[list[T], BeforeValidator(_none_as_empty)]
OptionalTime = Annotated[datetime | None, BeforeValidator(_blank_as_none)]


def rfc3339(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` (a naive value is taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


# -- the Cluster object --------------------------------------------------------------------
class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class Toggle(_Model):
    enabled: bool | None = None


class AddOnConfig(_Model):
    dashboard: Toggle | None = None
    headlamp: Toggle | None = None
    ingress: Toggle | None = None
    slurm_web: Toggle | None = None
    torchpass: Toggle | None = None


class AddOnInfo(_Model):
    add_on_type: str
    config: AddOnConfig
    name: str
    state: dict[str, Any] = Field(default_factory=dict)


class SlurmStartupScripts(_Model):
    controller_epilog: str | None = None
    controller_prolog: str | None = None
    extra_slurm_conf: str | None = None
    login_init_script: str | None = None
    nodeset_init_script: str | None = None
    worker_epilog: str | None = None
    worker_prolog: str | None = None


class ClusterConfig(_Model):
    load_balancer: str
    gpu_operator_version: str | None = None
    ingress: Toggle | None = None
    jumphost_enabled: bool | None = None
    kubernetes_dashboard_enabled: bool | None = None
    network_operator_version: str | None = None
    observability: Toggle | None = None
    slurm_startup_scripts: SlurmStartupScripts | None = None
    ssh_ca_enabled: bool | None = None


class OidcConfig(_Model):
    client_id: str
    group_claim: str
    group_prefix: str
    issuer_url: str
    username_claim: str
    username_prefix: str
    ca_cert: str | None = None


class PhaseTransition(_Model):
    """A cluster or node phase (e.g. CLUSTER_PHASE_READY, NODE_PHASE_RUNNING) and when it began."""

    phase: str
    transition_time: datetime


class ControlPlaneNode(_Model):
    host_name: str
    memory_gib: float
    network: str
    node_id: str
    num_cpu_cores: int
    phase_transitions: NullableList[PhaseTransition]
    status: str
    public_ipv4: str | None = None


class LinkedAlert(_Model):
    alert_name: str
    annotations: dict[str, str] = Field(default_factory=dict)
    cluster_id: str
    passive_health_check_alert_id: str
    severity: str
    started_at: datetime
    target_vm: str
    instance_id: str | None = None
    node_remediation_intent_id: str | None = None
    resolved_at: OptionalTime = None


class Remediation(_Model):
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


class GPUWorkerNode(_Model):
    host_name: str
    memory_gib: float
    networks: NullableList[str]
    node_id: str
    num_cpu_cores: int
    num_gpus: int
    phase_transitions: NullableList[PhaseTransition]
    status: str
    auto_remediation_enabled: bool | None = None
    deleted_at: OptionalTime = None
    ephemeral_storage: str | None = None
    ib_hca_count: int | None = None
    ib_hca_type: str | None = None
    instance_id: str | None = None
    latest_remediation: Remediation | None = None
    marked_for_deletion: bool | None = None
    nvswitch_count: int | None = None
    nvswitch_type: str | None = None
    public_ipv4: str | None = None
    slurm_worker_hostname: str | None = None


class ClusterVolume(_Model):
    size_tib: int
    status: str
    volume_id: str
    volume_name: str


class NodeLifecycleEvent(_Model):
    message: str
    node_id: str
    reason: str  # e.g. TogetherScaledUp, TogetherScaledDown, TogetherPreempted
    timestamp: datetime


class TogetherCluster(_Model):
    """The Cluster object of ``GET/PUT /compute/clusters/{cluster_id}``."""

    add_ons: NullableList[AddOnInfo]
    allocated_preemptible_gpus: int
    billing_type: str
    cluster_id: str
    cluster_name: str
    cluster_type: str
    control_plane_nodes: NullableList[ControlPlaneNode]
    cuda_version: str
    desired_preemptible_gpus: int
    gpu_type: str
    gpu_worker_nodes: NullableList[GPUWorkerNode]
    kube_config: str
    num_capacity_pool_gpus: int
    num_cpu_workers: int
    num_gpus: int
    num_reserved_gpus: int
    nvidia_driver_version: str
    phase_transitions: NullableList[PhaseTransition]
    project_id: str
    region: str
    status: str
    volumes: NullableList[ClusterVolume]
    capacity_pool_id: str | None = None
    cluster_config: ClusterConfig | None = None
    control_plane_ready: bool | None = None
    created_at: OptionalTime = None
    deleted_gpu_worker_nodes: NullableList[GPUWorkerNode] = Field(default_factory=list)
    duration_hours: int | None = None
    first_ready_at: OptionalTime = None
    install_traefik: bool | None = None
    is_in_substrate: bool | None = None
    machine_cluster_id: str | None = None
    node_lifecycle_events: NullableList[NodeLifecycleEvent] = Field(default_factory=list)
    nvidia_driver_version_id: str | None = None
    oidc_config: OidcConfig | None = None
    os_image: str | None = None
    reservation_end_time: OptionalTime = None
    reservation_start_time: OptionalTime = None
    slurm_shm_size_gib: int | None = None
    ums_org_id: str | None = None
    ums_project_id: str | None = None

    @property
    def steady(self) -> bool:
        return self.status in STEADY_STATUSES


class ClusterList(_Model):
    clusters: NullableList[TogetherCluster]


# -- the update body -----------------------------------------------------------------------
GpuCount = Annotated[int, Field(ge=0, strict=True)]


class ClusterUpdate(BaseModel):
    """The body of ``PUT /compute/clusters/{cluster_id}``; unset (None) fields are omitted
    and keep their current value at Together."""

    model_config = ConfigDict(extra="forbid")

    cluster_type: ClusterType | None = None
    num_gpus: GpuCount | None = None
    num_reserved_gpus: GpuCount | None = None
    num_preemptible_gpus: GpuCount | None = None
    num_capacity_pool_gpus: GpuCount | None = None
    reservation_end_time: AwareDatetime | None = None

    def set_fields(self) -> dict[str, Any]:
        """The fields that were set, in UPDATE_FIELDS order, as typed values."""
        return {
            name: getattr(self, name) for name in UPDATE_FIELDS if getattr(self, name) is not None
        }

    def to_body(self) -> dict[str, Any]:
        """The JSON request body: only the set fields."""
        body: dict[str, Any] = {}
        for name, value in self.set_fields().items():
            if isinstance(value, datetime):
                body[name] = rfc3339(value)
            elif isinstance(value, enum.Enum):
                body[name] = value.value
            else:
                body[name] = value
        return body


# -- the client ----------------------------------------------------------------------------
def build_together_transport(
    api_key: str,
    base_url: str,
    settings: ClientSettings,
    transport: httpx.AsyncBaseTransport | None = None,
) -> ProviderTransport:
    """The shared transport for one Together API key (Bearer auth; the key is registered as
    a secret so that no log line or exception text can carry it)."""
    return ProviderTransport(
        provider=PROVIDER,
        base_url=base_url,
        headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
        settings=settings,
        secrets=(api_key,),
        transport=transport,
    )


def cluster_path(cluster_id: str) -> str:
    """``compute/clusters/<id>`` with the id quoted as one path segment."""
    segment = quote(cluster_id, safe="")
    if segment in (".", ".."):  # would be resolved away as a dot segment
        segment = segment.replace(".", "%2E")
    return f"compute/clusters/{segment}"


def error_message(response: httpx.Response) -> str:
    """Together's own text for a failed call, else the HTTP reason phrase."""
    try:
        body = response.json()
    except ValueError:
        body = None
    text: Any = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            text = error.get("message")
        elif isinstance(error, str):
            text = error
        if not text:
            text = body.get("message") or body.get("detail")
    if text and not isinstance(text, str):
        text = json.dumps(text)
    if not text:
        text = response.reason_phrase or _reason(response.status_code)
    return str(text)[:_MESSAGE_LIMIT]


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


class TogetherClient:
    """Typed calls to Together's cluster endpoints over a ProviderTransport."""

    def __init__(self, transport: ProviderTransport, project_id: str | None = None) -> None:
        self.transport = transport
        self.project_id = project_id

    async def list_clusters(self) -> list[TogetherCluster]:
        params = {"projectId": self.project_id} if self.project_id else None
        body = await self._call("GET", "compute/clusters", "list", RetryMode.READ, params=params)
        try:
            return ClusterList.model_validate(body).clusters
        except ValidationError as exc:
            raise self._malformed("list", exc, may_have_applied=False) from None

    async def get_cluster(self, cluster_id: str) -> TogetherCluster:
        body = await self._call("GET", self._path(cluster_id, "get"), "get", RetryMode.READ)
        return self._cluster(body, "get", may_have_applied=False)

    async def update_cluster(self, cluster_id: str, update: ClusterUpdate) -> TogetherCluster:
        body = await self._call(
            "PUT",
            self._path(cluster_id, "update"),
            "update",
            RetryMode.IDEMPOTENT_WRITE,
            json_body=update.to_body(),
        )
        return self._cluster(body, "update", may_have_applied=True)

    async def aclose(self) -> None:
        await self.transport.aclose()

    # -- internals ----------------------------------------------------------------------
    def _path(self, cluster_id: str, operation: str) -> str:
        if not cluster_id:
            raise self._count(
                operation, ProviderRequestError("no cluster id given", provider=PROVIDER)
            )
        return cluster_path(cluster_id)

    async def _call(
        self,
        method: str,
        path: str,
        operation: str,
        mode: RetryMode,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
    ) -> Any:
        write = mode is not RetryMode.READ
        try:
            response = await self.transport.request(
                method, path, operation=operation, mode=mode, params=params, json=json_body
            )
        except ProviderError as exc:
            raise self._count(operation, exc) from None
        if not response.is_success:
            raise self._count(operation, self._status_error(response, may_have_applied=write))
        try:
            return response.json()
        except ValueError:
            raise self._count(
                operation,
                ProviderMalformedReply(
                    "the reply was not JSON",
                    provider=PROVIDER,
                    status=response.status_code,
                    may_have_applied=write,
                ),
            ) from None

    def _status_error(self, response: httpx.Response, *, may_have_applied: bool) -> ProviderError:
        retry_after = parse_retry_after(response.headers.get("Retry-After"), math.inf)
        return error_for_status(
            PROVIDER,
            response.status_code,
            error_message(response),
            retry_after=retry_after,
            may_have_applied=may_have_applied,
        )

    def _cluster(self, body: Any, operation: str, *, may_have_applied: bool) -> TogetherCluster:
        try:
            return TogetherCluster.model_validate(body)
        except ValidationError as exc:
            raise self._malformed(operation, exc, may_have_applied=may_have_applied) from None

    def _malformed(
        self, operation: str, exc: ValidationError, *, may_have_applied: bool
    ) -> ProviderError:
        first = exc.errors()[0] if exc.errors() else None
        where = ".".join(str(p) for p in first["loc"]) if first else "?"
        detail = f"{where}: {first['msg']}" if first else "unexpected shape"
        return self._count(
            operation,
            ProviderMalformedReply(
                f"the reply is not a cluster object ({exc.error_count()} problems, first {detail})",
                provider=PROVIDER,
                status=200,
                may_have_applied=may_have_applied,
            ),
        )

    @staticmethod
    def _count(operation: str, error: ProviderError) -> ProviderError:
        PROVIDER_ERRORS.labels(PROVIDER, operation, error.kind).inc()
        return error


# -- rules (SPEC §1.1) ---------------------------------------------------------------------
@dataclass(frozen=True)
class _Target:
    """What the rules need to know about the cluster an update is aimed at."""

    name: str
    billing_type: str | None
    capacity_pool_id: str | None
    current: dict[str, Any]  # UPDATE_FIELDS → current value (datetime for the end time)

    @classmethod
    def of(cls, cluster: TogetherCluster | ClusterState) -> _Target:
        state = cluster if isinstance(cluster, ClusterState) else cluster_state(cluster, project="")
        current = {name: state.current.get(name) for name in UPDATE_FIELDS}
        end = current["reservation_end_time"]
        if isinstance(end, str):
            current["reservation_end_time"] = _aware(datetime.fromisoformat(end))
        return cls(
            name=state.summary.name,
            billing_type=state.summary.billing,
            capacity_pool_id=state.summary.capacity_pool_id or None,
            current=current,
        )


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _multiple_of_8(field: str, value: int) -> None:
    if value % GPUS_PER_NODE:
        lower = value // GPUS_PER_NODE * GPUS_PER_NODE
        raise RuleViolation(
            f"{field} must be a multiple of 8 (got {value}; try {lower} or {lower + 8})",
            field=field,
        )


def _same(current: Any, new: Any) -> bool:
    if isinstance(new, datetime) and isinstance(current, datetime):
        return _aware(current) == _aware(new)
    return bool(current == new)


def _shown(value: Any) -> str:
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def check_update(
    cluster: TogetherCluster | ClusterState, update: ClusterUpdate, now: datetime
) -> None:
    """Refuse, before any call, an update Together would refuse or that would do nothing.
    ``cluster`` is the cluster as fetched (or the ClusterState the adapter made of it)."""
    target = _Target.of(cluster)
    changes = update.set_fields()
    if not changes:
        raise RuleViolation(
            "nothing to change: set at least one of " + ", ".join(UPDATE_FIELDS), field=None
        )
    if all(_same(target.current[name], value) for name, value in changes.items()):
        already = ", ".join(f"{name} is already {_shown(value)}" for name, value in changes.items())
        raise RuleViolation(f"nothing would change: {already}", field=next(iter(changes)))
    _check_counts(target, update)
    _check_billing(target, update, now)


def _check_counts(target: _Target, update: ClusterUpdate) -> None:
    if update.num_preemptible_gpus is not None:
        _multiple_of_8("num_preemptible_gpus", update.num_preemptible_gpus)
    if update.num_capacity_pool_gpus is not None:
        _multiple_of_8("num_capacity_pool_gpus", update.num_capacity_pool_gpus)
        if not target.capacity_pool_id:
            raise RuleViolation(
                f"num_capacity_pool_gpus applies only to a cluster created from a capacity pool; "
                f"{target.name} has no capacity_pool_id (leave this field empty)",
                field="num_capacity_pool_gpus",
            )
    num_gpus = update.num_gpus if update.num_gpus is not None else target.current["num_gpus"]
    pool = update.num_capacity_pool_gpus
    if pool is not None and num_gpus is not None and pool > num_gpus:
        raise RuleViolation(
            f"num_capacity_pool_gpus cannot exceed num_gpus (got {pool}, num_gpus would be "
            f"{num_gpus}; set it to {num_gpus} or less, or raise num_gpus too)",
            field="num_capacity_pool_gpus",
        )
    current_pool = target.current["num_capacity_pool_gpus"] or 0
    if (
        pool is None
        and update.num_gpus is not None
        and target.capacity_pool_id
        and update.num_gpus < current_pool
    ):
        raise RuleViolation(
            f"num_gpus {update.num_gpus} would be below num_capacity_pool_gpus ({current_pool}); "
            f"keep num_gpus at {current_pool} or more, or lower num_capacity_pool_gpus too",
            field="num_gpus",
        )


def _check_billing(target: _Target, update: ClusterUpdate, now: datetime) -> None:
    billing = target.billing_type or "unknown"
    if update.num_reserved_gpus is not None and billing != BillingType.RESERVED:
        raise RuleViolation(
            f"num_reserved_gpus applies only to RESERVED clusters; {target.name} is billed "
            f"{billing} (leave this field empty, or change num_gpus instead)",
            field="num_reserved_gpus",
        )
    end = update.reservation_end_time
    if end is None:
        return
    if billing not in PREPAID_BILLING:
        raise RuleViolation(
            f"reservation_end_time applies only to prepaid clusters (RESERVED or "
            f"SCHEDULED_CAPACITY); {target.name} is billed {billing} (leave this field empty)",
            field="reservation_end_time",
        )
    if end <= _aware(now):
        raise RuleViolation(
            f"reservation_end_time must be in the future (got {rfc3339(end)}; it is now "
            f"{rfc3339(now.replace(microsecond=0))})",
            field="reservation_end_time",
        )


# -- change kinds --------------------------------------------------------------------------
def classify(cluster: TogetherCluster | ClusterState, update: ClusterUpdate) -> list[str]:
    """The kinds of change an update makes: scale_up, scale_down, change_type, decommission."""
    target = _Target.of(cluster)
    kinds: list[str] = []
    rises = falls = False
    for name in _INT_FIELDS:
        new = getattr(update, name)
        old = target.current[name]
        if new is None or old is None:
            continue
        rises = rises or new > old
        falls = falls or new < old
    if rises:
        kinds.append("scale_up")
    if falls:
        kinds.append("scale_down")
    if update.cluster_type is not None and update.cluster_type != target.current["cluster_type"]:
        kinds.append("change_type")
    if update.reservation_end_time is not None:
        kinds.append("decommission")
    return kinds


# -- summaries -----------------------------------------------------------------------------
def to_summary(cluster: TogetherCluster, project: str) -> ClusterSummary:
    end = cluster.reservation_end_time
    return ClusterSummary(
        provider=PROVIDER,
        project=project,
        cluster_id=cluster.cluster_id,
        name=cluster.cluster_name,
        status=cluster.status,
        steady=cluster.steady,
        gpu_type=cluster.gpu_type,
        region=cluster.region,
        billing=cluster.billing_type,
        cluster_type=cluster.cluster_type,
        num_gpus=cluster.num_gpus,
        num_reserved_gpus=cluster.num_reserved_gpus,
        desired_preemptible_gpus=cluster.desired_preemptible_gpus,
        allocated_preemptible_gpus=cluster.allocated_preemptible_gpus,
        num_capacity_pool_gpus=cluster.num_capacity_pool_gpus,
        capacity_pool_id=cluster.capacity_pool_id or None,
        reservation_end_time=rfc3339(end) if end is not None else None,
    )


def current_values(cluster: TogetherCluster) -> dict[str, Any]:
    """The current value of each settable field (JSON-ready)."""
    values: dict[str, Any] = {
        name: getattr(cluster, _CURRENT_SOURCE[name]) for name in UPDATE_FIELDS
    }
    end = cluster.reservation_end_time
    values["reservation_end_time"] = rfc3339(end) if end is not None else None
    return values


def cluster_state(cluster: TogetherCluster, project: str) -> ClusterState:
    """The ClusterState the adapter hands out: summary plus the six current values."""
    return ClusterState(summary=to_summary(cluster, project), current=current_values(cluster))


# -- parsing raw field values (Slack strings or typed values) -------------------------------
def _parse_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("must be a whole number")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            raise ValueError(f"must be a whole number (got {value.strip()!r})") from None
    else:
        raise ValueError(f"must be a whole number (got {value!r})")
    if number < 0:
        raise ValueError(f"must be 0 or more (got {number})")
    return number


def _parse_cluster_type(value: Any) -> ClusterType:
    text = str(value.value if isinstance(value, enum.Enum) else value).strip().upper()
    try:
        return ClusterType(text)
    except ValueError:
        raise ValueError(f"must be KUBERNETES or SLURM (got {str(value).strip()!r})") from None


def _time_from_text(text: str) -> datetime:
    if text.isdigit():  # Slack's datetimepicker gives epoch seconds
        try:
            return datetime.fromtimestamp(int(text), UTC)
        except (OverflowError, ValueError, OSError):
            raise ValueError(f"is not a usable time (got {text!r})") from None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"must be an RFC 3339 time such as 2026-09-01T00:00:00Z (got {text!r})"
        ) from None


def _parse_time(value: Any) -> datetime:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, int) and not isinstance(value, bool):
        parsed = _time_from_text(str(value))
    elif isinstance(value, str):
        parsed = _time_from_text(value.strip())
    else:
        raise ValueError(f"must be an RFC 3339 time (got {value!r})")
    if parsed.tzinfo is None:
        raise ValueError(
            f"needs a time zone, e.g. {parsed.replace(microsecond=0).isoformat()}Z for UTC"
        )
    return parsed


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "cluster_type": _parse_cluster_type,
    "num_gpus": _parse_int,
    "num_reserved_gpus": _parse_int,
    "num_preemptible_gpus": _parse_int,
    "num_capacity_pool_gpus": _parse_int,
    "reservation_end_time": _parse_time,
}


def parse_update(raw: Mapping[str, Any]) -> ClusterUpdate:
    """A ClusterUpdate from raw values; blank means not set. Every bad field is reported at
    once in a ChangeInputError."""
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, value in raw.items():
        if name not in _PARSERS:
            errors[name] = "is not a Together update field (use " + ", ".join(UPDATE_FIELDS) + ")"
            continue
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        try:
            values[name] = _PARSERS[name](value)
        except ValueError as exc:
            errors[name] = str(exc)
    if errors:
        raise ChangeInputError(errors)
    return ClusterUpdate(**values)


# -- the adapter ---------------------------------------------------------------------------
def _utc_now() -> datetime:
    return datetime.now(UTC)


_FIELD_SPECS: tuple[FieldSpec, ...] = (
    FieldSpec(
        name="cluster_type",
        label="Cluster type",
        kind="choice",
        choices=(ClusterType.KUBERNETES.value, ClusterType.SLURM.value),
        hint="KUBERNETES or SLURM",
    ),
    FieldSpec(
        name="num_gpus",
        label="Total GPUs",
        kind="int",
        hint="total GPU count, 8 per node (e.g. 8, 16, 24)",
    ),
    FieldSpec(
        name="num_reserved_gpus",
        label="Reserved GPUs",
        kind="int",
        hint="RESERVED billing only",
    ),
    FieldSpec(
        name="num_preemptible_gpus",
        label="Preemptible GPUs",
        kind="int",
        hint="multiple of 8; fulfilled asynchronously",
    ),
    FieldSpec(
        name="num_capacity_pool_gpus",
        label="Capacity-pool GPUs",
        kind="int",
        hint="multiple of 8, at most num_gpus; capacity-pool clusters only",
    ),
    FieldSpec(
        name="reservation_end_time",
        label="Decommission time",
        kind="datetime",
        hint="RFC 3339, e.g. 2026-09-01T00:00:00Z; RESERVED or SCHEDULED_CAPACITY only",
    ),
)


class TogetherAdapter:
    """The provider-neutral face (ProviderAdapter) of one project's Together client.

    ``plan`` needs no cached cluster: everything the rules read is in the ClusterState that
    ``get_cluster`` returned (summary + current values), so a state kept across a modal
    round trip, or planned on another replica, is checked the same way."""

    provider: ProviderName = "together"

    def __init__(
        self,
        client: TogetherClient,
        project: str,
        now: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.client = client
        self.project = project
        self._now = now

    async def list_clusters(self) -> list[ClusterSummary]:
        return [to_summary(c, self.project) for c in await self.client.list_clusters()]

    async def get_cluster(self, cluster_id: str) -> ClusterState:
        cluster = await self.client.get_cluster(cluster_id)
        wanted = self.client.project_id
        if wanted and cluster.project_id != wanted:
            # The key may reach other projects' clusters; the policy project is only the
            # one its list shows, so another project's cluster cannot be shown or changed.
            raise ProviderNotFound(
                f"cluster {cluster_id} not found in project {wanted}", provider=PROVIDER
            )
        return cluster_state(cluster, self.project)

    def actions(self) -> list[str]:
        return ["update"]

    def fields_for(self, action: str) -> list[FieldSpec]:
        self._require_update(action)
        return list(_FIELD_SPECS)

    def plan(self, state: ClusterState, action: str, raw: Mapping[str, Any]) -> ChangePlan:
        self._require_update(action)
        update = parse_update(raw)
        check_update(state, update, self._now())
        return ChangePlan(
            provider=self.provider,
            project=self.project,
            cluster_id=state.summary.cluster_id,
            cluster_name=state.summary.name,
            action="update",
            body=update.to_body(),
            kinds=classify(state, update),
            lines=self._preview(state, update),
            fingerprint=self._fingerprint(state),
        )

    async def apply(self, plan: ChangePlan) -> ApplyOutcome:
        if plan.provider != self.provider or plan.action != "update":
            raise ValueError(f"not a Together update plan: {plan.provider}/{plan.action}")
        update = ClusterUpdate.model_validate(plan.body)
        cluster = await self.client.update_cluster(plan.cluster_id, update)
        return ApplyOutcome(
            message="Together accepted the update", summary=to_summary(cluster, self.project)
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    # -- internals ----------------------------------------------------------------------
    @staticmethod
    def _require_update(action: str) -> None:
        if action != "update":
            raise ChangeInputError(
                {"action": f"Together has only the 'update' action (got {action!r})"}
            )

    @staticmethod
    def _preview(state: ClusterState, update: ClusterUpdate) -> list[PreviewLine]:
        lines = []
        for name, value in update.set_fields().items():
            before = state.current.get(name)
            lines.append(
                PreviewLine(
                    field=name,
                    before=None if before is None else str(before),
                    after=_shown(value),
                )
            )
        return lines

    @staticmethod
    def _fingerprint(state: ClusterState) -> dict[str, Any]:
        # The settable fields only: a cluster that merely finished provisioning since the
        # preview (status moved on) still matches what the approver saw.
        return {name: state.current.get(name) for name in UPDATE_FIELDS}
