"""E2E Networks TIR training clusters: the wire models (lenient about the shapes replies come
in) and the action request bodies."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
)

from bot.providers.base import (
    ProviderName,
)

PROVIDER: ProviderName = "e2e"
# Statuses in which a cluster is not on its way somewhere else. Anything not listed
# (Creating, Scaling, Restarting, Updating, Deleting, or a status never seen) is transitional.
STEADY_STATUSES = frozenset(
    {"running", "stopped", "failed", "error", "suspended", "terminated", "deleted", "completed"}
)
RUNNING = "Running"


# -- lenient parsing of replies -----------------------------------------------------------


def lenient_int(value: object) -> int | None:
    """Counts arrive as ints or as strings ("8"); anything else is treated as unknown."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                return None
            return int(number) if number.is_integer() else None
    return None


def _lenient_float(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


MEMORY_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)?\s*$")


def normalise_memory(value: object) -> str | None:
    """``"2000GB"`` (list items) and ``"2000 GB"`` (detail) both become ``"2000 GB"``."""
    if value is None:
        return None
    text = str(value)
    match = MEMORY_PATTERN.match(text)
    if match is None:
        return text.strip()
    number, unit = match.groups()
    return f"{number} {unit}" if unit else number


def _status_text(value: object) -> str:
    if value is None or value == "":
        return "Unknown"
    return str(value)


def _object_or_none(value: object) -> object:
    return value if isinstance(value, dict) else None


def _objects_only(value: object) -> list[dict[str, object]]:
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


Count = Annotated[int | None, BeforeValidator(lenient_int)]
Price = Annotated[float | None, BeforeValidator(_lenient_float)]
Memory = Annotated[str | None, BeforeValidator(normalise_memory)]
Status = Annotated[str, BeforeValidator(_status_text)]


class _Open(BaseModel):
    """Replies keep every field the provider sends, known or not."""

    model_config = ConfigDict(extra="allow")


class E2ECreatedBy(_Open):
    id: Count = None
    name: str | None = None
    email: str | None = None
    username: str | None = None
    is_primary_contact: bool | None = None
    currency: str | None = None
    is_suspended: bool | None = None


class E2ESkuSpecs(_Open):
    sku_id: Count = None
    name: str | None = None
    series: str | None = None
    cpu: Count = None
    gpu: Count = None
    memory: Count = None
    ephemeral_storage: Count = None
    gpu_memory: Count = None
    is_free: bool | None = None
    is_active: bool | None = None
    local_storage_in_gb: Count = None
    sku_type: str | None = None
    gpu_card_type: str | None = None
    category: str | None = None
    variant: str | None = None
    no_of_nodes: Count = None


class E2ESkuPlan(_Open):
    sku_item_price_id: Count = None
    sku_type: str | None = None
    committed_days: Count = None
    unit_price: Price = None
    currency: str | None = None
    is_active: bool | None = None
    description: str | None = None
    location: str | None = None


class E2ESkuDetails(_Open):
    specs: Annotated[E2ESkuSpecs | None, BeforeValidator(_object_or_none)] = None
    plan: Annotated[E2ESkuPlan | None, BeforeValidator(_object_or_none)] = None


class E2EImageVersion(_Open):
    id: Count = None
    version: str | None = None
    description: str | None = None
    name: str | None = None
    slug_name: str | None = None
    framework: str | None = None
    is_internal: bool | None = None


class E2ESshKey(_Open):
    pk: Count = None
    label: str | None = None


CreatedByField = Annotated[E2ECreatedBy | None, BeforeValidator(_object_or_none)]


class E2EReservedIp(_Open):
    """``data`` of an ``attach_ip`` reply."""

    id: Count = None
    ip_address: str | None = None
    service_name: str | None = None
    created_at: str | None = None
    status: str | None = None
    reserved_by: CreatedByField = None
    service_type: str | None = None
    service_id: Count = None
    location: str | None = None
    egress_ip: str | None = None
    myaccount_project_id: Count = None
    vpc_details: Any = None
    connection_status: str | None = None


class E2ESecurityGroup(_Open):
    id: Count = None
    name: str | None = None


ReservedIpField = Annotated[E2EReservedIp | None, BeforeValidator(_object_or_none)]
SkuDetailsField = Annotated[E2ESkuDetails | None, BeforeValidator(_object_or_none)]
ImageVersionField = Annotated[E2EImageVersion | None, BeforeValidator(_object_or_none)]


class _ClusterCommon(_Open):
    id: int
    name: str = ""
    created_by: CreatedByField = None
    no_of_nodes: Count = None
    created_at: str | None = None
    status: Status = "Unknown"
    sku_details: SkuDetailsField = None
    private_cloud_name: str | None = None
    private_cloud_id: Count = None
    has_local_storage: bool | None = None
    image_version: ImageVersionField = None
    available_gpu: Count = None
    available_cpu: Count = None
    available_memory: Memory = None

    @property
    def specs(self) -> E2ESkuSpecs | None:
        return self.sku_details.specs if self.sku_details else None

    @property
    def plan(self) -> E2ESkuPlan | None:
        return self.sku_details.plan if self.sku_details else None


class E2EClusterListItem(_ClusterCommon):
    """An item of ``GET /distributed_jobs_v2/cluster/``. Its counts are per node (they
    match the SKU's per-node specs) and arrive as strings; memory as ``"2000GB"``."""

    no_of_gpu: Count = None
    no_of_cpu: Count = None
    node_memory: Memory = None


class E2EClusterDetail(_ClusterCommon):
    """``data`` of ``GET /distributed_jobs_v2/cluster/{id}/`` (and of most actions):
    cluster-wide totals as integers, memory as ``"2000 GB"``."""

    total_gpu: Count = None
    total_cpu: Count = None
    total_memory: Memory = None
    worker_nodes: list[Any] = Field(default_factory=list)
    local_storage_per_node: Any = None
    image_pull_policy: str | None = None
    ssh_keys: Annotated[list[E2ESshKey], BeforeValidator(_objects_only)] = Field(
        default_factory=list
    )

    ssh_public_ip: str | None = None
    has_floating_ip: bool | None = None
    reserve_ip: ReservedIpField = None
    security_groups: Annotated[list[E2ESecurityGroup], BeforeValidator(_objects_only)] = Field(
        default_factory=list
    )
    clone_data: Any = None

    @property
    def ssh_key_ids(self) -> list[int]:
        return [key.pk for key in self.ssh_keys if key.pk is not None]


E2ECluster = E2EClusterListItem | E2EClusterDetail


# -- action requests ----------------------------------------------------------------------

PositiveId = Annotated[int, Field(strict=True, gt=0)]
IdList = Annotated[list[PositiveId], Field(min_length=1)]


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UpdateSshKeysAction(_Action):
    action: Literal["update_ssh_keys"] = "update_ssh_keys"
    ssh_key_ids: IdList


class UpdateImageAction(_Action):
    action: Literal["update_image"] = "update_image"
    image_version_id: PositiveId


class RestartWorkersAction(_Action):
    action: Literal["restart_workers"] = "restart_workers"


class RestartClusterAction(_Action):
    action: Literal["restart_cluster"] = "restart_cluster"


class ScaleClusterAction(_Action):
    action: Literal["scale_cluster"] = "scale_cluster"
    additional_nodes: Annotated[int, Field(strict=True, ge=1)]  # nodes to ADD


class AttachIpAction(_Action):
    action: Literal["attach_ip"] = "attach_ip"
    reserved_ip_id: PositiveId


class DetachIpAction(_Action):
    action: Literal["detach_ip"] = "detach_ip"
    reserved_ip_id: PositiveId
    ip_type: Literal["reserved"] = "reserved"


class RemoveSecurityGroupAction(_Action):
    action: Literal["remove_security_group"] = "remove_security_group"
    security_group_id: PositiveId


class AddSecurityGroupAction(_Action):
    action: Literal["add_security_group"] = "add_security_group"
    security_groups_ids: IdList  # sic: the API spells it "groups_ids"


E2EActionRequest = Annotated[
    UpdateSshKeysAction
    | UpdateImageAction
    | RestartWorkersAction
    | RestartClusterAction
    | ScaleClusterAction
    | AttachIpAction
    | DetachIpAction
    | RemoveSecurityGroupAction
    | AddSecurityGroupAction,
    Field(discriminator="action"),
]
ACTION_ADAPTER: TypeAdapter[E2EActionRequest] = TypeAdapter(E2EActionRequest)

ACTIONS: tuple[str, ...] = (
    "update_ssh_keys",
    "update_image",
    "restart_workers",
    "restart_cluster",
    "scale_cluster",
    "attach_ip",
    "detach_ip",
    "remove_security_group",
    "add_security_group",
)

ReplyKind = Literal["cluster", "reserved_ip", "empty", "text"]
REPLY_KINDS: dict[str, ReplyKind] = {
    "update_ssh_keys": "cluster",
    "update_image": "cluster",
    "restart_workers": "cluster",
    "restart_cluster": "cluster",
    "scale_cluster": "cluster",
    "attach_ip": "reserved_ip",
    "detach_ip": "empty",
    "remove_security_group": "text",
    "add_security_group": "text",
}


class ActionReply(BaseModel):
    """A successful action reply; which of cluster / reserved_ip / text is set follows
    the action (SPEC §1.2 table)."""

    action: str
    message: str
    cluster: E2EClusterDetail | None = None
    reserved_ip: E2EReservedIp | None = None
    text: str | None = None
