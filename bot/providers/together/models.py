"""Together AI Instant Clusters: the wire models (Cluster, its parts, the update body) and
the known values of its enum fields.

Enum-valued fields of the API are parsed as plain strings (the known values are the StrEnums
below) so that a status, GPU type or phase Together adds later is shown as-is instead of
breaking the parse.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
)

from bot.providers.lenient import NullableList, OptionalTime

# The remediation models are the capability's (bot.providers.remediations); named here too.
from bot.providers.remediations import (
    FINAL_STATES as FINAL_STATES,
)
from bot.providers.remediations import (
    MODE_TEXT as MODE_TEXT,
)
from bot.providers.remediations import (
    AlertAnnotation as AlertAnnotation,
)
from bot.providers.remediations import (
    AlertSeverity as AlertSeverity,
)
from bot.providers.remediations import (
    LinkedAlert as LinkedAlert,
)
from bot.providers.remediations import (
    Remediation as Remediation,
)
from bot.providers.remediations import (
    RemediationMode as RemediationMode,
)
from bot.providers.remediations import (
    RemediationState as RemediationState,
)
from bot.providers.remediations import (
    RemediationTrigger as RemediationTrigger,
)
from bot.providers.remediations import (
    SlurmNodeUnavailable as SlurmNodeUnavailable,
)
from bot.providers.remediations import (
    XidDetails as XidDetails,
)
from bot.providers.remediations import (
    XidEvent as XidEvent,
)

PROVIDER = "together"
GPUS_PER_NODE = 8


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
GPU_COUNT_FIELDS: tuple[str, ...] = (
    "num_gpus",
    "num_reserved_gpus",
    "num_preemptible_gpus",
    "num_capacity_pool_gpus",
)
# Update field → the Cluster field that holds its current value.
CURRENT_SOURCE: dict[str, str] = {
    "cluster_type": "cluster_type",
    "num_gpus": "num_gpus",
    "num_reserved_gpus": "num_reserved_gpus",
    "num_preemptible_gpus": "desired_preemptible_gpus",
    "num_capacity_pool_gpus": "num_capacity_pool_gpus",
    "reservation_end_time": "reservation_end_time",
}


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


class RemediationPage(_Model):
    remediations: NullableList[Remediation] = Field(default_factory=list)
    has_next: bool = False
    next_page_token: str = ""


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

    def set_fields(self) -> dict[str, object]:
        """The fields that were set, in UPDATE_FIELDS order, as typed values."""
        return {
            name: getattr(self, name) for name in UPDATE_FIELDS if getattr(self, name) is not None
        }

    def to_body(self) -> dict[str, object]:
        """The JSON request body: only the set fields."""
        body: dict[str, object] = {}
        for name, value in self.set_fields().items():
            if isinstance(value, datetime):
                body[name] = rfc3339(value)
            elif isinstance(value, enum.Enum):
                body[name] = value.value
            else:
                body[name] = value
        return body
