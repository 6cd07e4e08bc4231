"""E2E Networks TIR training clusters: typed client, reply rules and the gpuops adapter.

The API (SPEC §1.2) answers with an envelope ``{code, data, errors, message}`` whose failure
shapes are heterogeneous (DRF ``{"detail"}``, ``{"status_code", "message"}``, ``errors: true``
on HTTP 200 …); every reply goes through ``_failure_of`` before its data is trusted.
Cluster changes are actions (``PUT …/cluster/{id}/`` with ``{"action": name, …}``) that are
never repeated once they may have reached the server.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import httpx
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
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
    RuleViolation,
    error_for_status,
)
from bot.providers.http import ClientSettings, ProviderTransport, RetryMode, parse_retry_after

log = logging.getLogger(__name__)

PROVIDER: ProviderName = "e2e"
E2E_DEFAULT_BASE_URL = "https://api.e2enetworks.com/myaccount/api/v1/gpu"
CLUSTERS_PATH = "distributed_jobs_v2/cluster/"

# A server that keeps announcing more pages is not followed past this many.
MAX_PAGES = 200

# Statuses in which a cluster is not on its way somewhere else. Anything not listed
# (Creating, Scaling, Restarting, Updating, Deleting, or a status never seen) is transitional.
STEADY_STATUSES = frozenset(
    {"running", "stopped", "failed", "error", "suspended", "terminated", "deleted", "completed"}
)
RUNNING = "Running"


# -- lenient parsing of replies -----------------------------------------------------------


def _lenient_int(value: Any) -> int | None:
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


def _lenient_float(value: Any) -> float | None:
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


_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)?\s*$")


def normalise_memory(value: Any) -> str | None:
    """``"2000GB"`` (list items) and ``"2000 GB"`` (detail) both become ``"2000 GB"``."""
    if value is None:
        return None
    text = str(value)
    match = _MEMORY.match(text)
    if match is None:
        return text.strip()
    number, unit = match.groups()
    return f"{number} {unit}" if unit else number


def _status_text(value: Any) -> str:
    if value is None or value == "":
        return "Unknown"
    return str(value)


def _object_or_none(value: Any) -> Any:
    return value if isinstance(value, dict) else None


def _objects_only(value: Any) -> list[Any]:
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


Count = Annotated[int | None, BeforeValidator(_lenient_int)]
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

    @property
    def ssh_key_ids(self) -> list[int]:
        return [key.pk for key in self.ssh_keys if key.pk is not None]


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


# -- reply rules ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Failure:
    status: int | None
    message: str


def _errors_say_failure(errors: Any) -> bool:
    if errors is True:
        return True
    if isinstance(errors, dict | list | str):
        return len(errors) > 0
    return False


def _error_texts(errors: Any) -> list[str]:
    """Readable lines from an ``errors`` object such as ``{"auth": ["invalid"]}``."""
    if isinstance(errors, str):
        return [errors] if errors.strip() else []
    if isinstance(errors, list):
        return [str(item) for item in errors if str(item).strip()]
    if not isinstance(errors, dict):
        return []
    lines = []
    for key, value in errors.items():
        values = value if isinstance(value, list) else [value]
        text = ", ".join(str(v) for v in values)
        lines.append(text if key in ("detail", "non_field_errors") else f"{key}: {text}")
    return lines


def _provider_message(body: Mapping[str, Any], fallback: str) -> str:
    """What the user is shown: the provider's message/detail, plus any error details
    the message does not already say."""
    head = ""
    for key in ("message", "detail"):
        value = body.get(key)
        if isinstance(value, str) and value.strip():
            head = value.strip()
            break
        if isinstance(value, list | dict) and value:
            head = "; ".join(_error_texts(value))
            break
    extra = [line for line in _error_texts(body.get("errors")) if line not in head]
    if not head:
        return "; ".join(extra) or fallback
    return f"{head} ({'; '.join(extra)})" if extra else head


def _failure_of(response: httpx.Response, body: Any) -> _Failure | None:
    http_status = response.status_code
    fallback = response.reason_phrase or "no message"  # the error text adds the status
    if not 200 <= http_status < 300:
        message = _provider_message(body, fallback) if isinstance(body, dict) else fallback
        return _Failure(http_status, message)
    if not isinstance(body, dict):
        return None
    codes = [_lenient_int(body.get(key)) for key in ("code", "status_code")]
    status = next((code for code in codes if code is not None and code >= 400), None)
    failed = status is not None or "detail" in body or _errors_say_failure(body.get("errors"))
    if not failed:
        return None
    return _Failure(status, _provider_message(body, "the provider reported a failure"))


def _error_from(failure: _Failure, response: httpx.Response, *, is_action: bool) -> ProviderError:
    # Retry-After is reported to the caller as a hint; the transport applies its own cap.
    return error_for_status(
        PROVIDER,
        failure.status,
        failure.message,
        retry_after=parse_retry_after(response.headers.get("Retry-After"), 3600.0),
        may_have_applied=is_action,
    )


def _malformed(what: str, *, is_action: bool) -> ProviderMalformedReply:
    return ProviderMalformedReply(
        f"unexpected reply: {what}", provider=PROVIDER, may_have_applied=is_action
    )


def check_reply(response: httpx.Response, *, is_action: bool) -> dict[str, Any]:
    """The reply's envelope when it is a success; otherwise the typed error (SPEC §1.2)."""
    try:
        body: Any = response.json()
        parsed = True
    except ValueError:
        body, parsed = None, False
    failure = _failure_of(response, body)
    if failure is not None:
        raise _error_from(failure, response, is_action=is_action)
    if not parsed:
        raise _malformed("the body is not JSON", is_action=is_action)
    if not isinstance(body, dict):
        raise _malformed("the body is not a JSON object", is_action=is_action)
    return body


# -- transport and client -------------------------------------------------------------------


def build_e2e_transport(
    api_key: str,
    auth_token: str,
    base_url: str = E2E_DEFAULT_BASE_URL,
    settings: ClientSettings | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> ProviderTransport:
    """HTTP for one E2E credential: ``apikey`` query parameter and Bearer token on every
    call; both values are registered for redaction."""
    return ProviderTransport(
        provider=PROVIDER,
        base_url=base_url,
        headers={"Authorization": f"Bearer {auth_token}"},
        auth_params={"apikey": api_key},
        settings=settings or ClientSettings(),
        secrets=(api_key, auth_token),
        transport=transport,
    )


class E2EClient:
    """The E2E training-cluster endpoints gpuops uses, for one project and location."""

    def __init__(
        self,
        transport: ProviderTransport,
        project_id: int,
        location: str,
        active_iam: int | None = None,
        per_page: int = 50,
    ) -> None:
        self.transport = transport
        self.project_id = project_id
        self.location = location
        self.active_iam = active_iam
        self.per_page = max(1, per_page)

    def _scope(self) -> dict[str, Any]:
        scope: dict[str, Any] = {"project_id": self.project_id, "location": self.location}
        if self.active_iam is not None:
            scope["active_iam"] = self.active_iam
        return scope

    async def _call(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        mode: RetryMode,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
    ) -> dict[str, Any]:
        is_action = mode is RetryMode.UNSAFE_WRITE
        try:
            response = await self.transport.request(
                method,
                path,
                operation=operation,
                mode=mode,
                params={**self._scope(), **(params or {})},
                json=json,
            )
            return check_reply(response, is_action=is_action)
        except ProviderError as exc:
            PROVIDER_ERRORS.labels(PROVIDER, operation, exc.kind).inc()
            raise

    async def list_clusters(self) -> list[E2EClusterListItem]:
        """Every cluster of the project, reading page after page."""
        clusters: dict[int, E2EClusterListItem] = {}
        page = 1
        while True:
            body = await self._call(
                "GET",
                CLUSTERS_PATH,
                operation="list_clusters",
                mode=RetryMode.READ,
                params={"page_no": page, "per_page": self.per_page},
            )
            items = _parse_list_page(body)
            new = [item for item in items if item.id not in clusters]
            clusters.update((item.id, item) for item in new)
            if not _more_pages(body, page, len(items), len(new), self.per_page):
                break
            if page >= MAX_PAGES:
                log.warning("e2e: stopped listing clusters after %d pages", MAX_PAGES)
                break
            page += 1
        return list(clusters.values())

    async def get_cluster(self, cluster_id: int) -> E2EClusterDetail:
        body = await self._call(
            "GET", f"{CLUSTERS_PATH}{cluster_id}/", operation="get_cluster", mode=RetryMode.READ
        )
        return _parse_detail(body.get("data"), is_action=False)

    async def run_action(self, cluster_id: int, action: E2EActionRequest) -> ActionReply:
        """Send one action. Never repeated once it may have reached the server."""
        body = await self._call(
            "PUT",
            f"{CLUSTERS_PATH}{cluster_id}/",
            operation="action",
            mode=RetryMode.UNSAFE_WRITE,
            json=action.model_dump(mode="json"),
        )
        return _parse_action_reply(action.action, body)

    async def aclose(self) -> None:
        await self.transport.aclose()


def _parse_list_page(body: Mapping[str, Any]) -> list[E2EClusterListItem]:
    data = body.get("data")
    if not isinstance(data, list):
        raise _malformed("the cluster list is not an array", is_action=False)
    try:
        return [E2EClusterListItem.model_validate(item) for item in data]
    except ValidationError:
        raise _malformed("a cluster in the list has no usable id", is_action=False) from None


def _more_pages(body: Mapping[str, Any], page: int, got: int, new: int, per_page: int) -> bool:
    if got == 0 or new == 0:  # an empty page, or a server repeating itself
        return False
    total_pages = _lenient_int(body.get("total_page_number"))
    if total_pages is not None:
        return page < total_pages
    total_count = _lenient_int(body.get("total_count"))
    if total_count is not None:
        return page < math.ceil(total_count / per_page)
    return got >= per_page


def _parse_detail(data: Any, *, is_action: bool) -> E2EClusterDetail:
    if not isinstance(data, dict):
        raise _malformed("the cluster is not an object", is_action=is_action)
    try:
        return E2EClusterDetail.model_validate(data)
    except ValidationError:
        raise _malformed("the cluster has no usable id", is_action=is_action) from None


def _parse_action_reply(action: str, body: Mapping[str, Any]) -> ActionReply:
    message = _provider_message(body, "done")
    data = body.get("data")
    kind = REPLY_KINDS[action]
    if kind == "cluster":
        return ActionReply(
            action=action, message=message, cluster=_parse_detail(data, is_action=True)
        )
    if kind == "reserved_ip":
        if not isinstance(data, dict):
            raise _malformed("the reserved IP is not an object", is_action=True)
        try:
            reserved_ip = E2EReservedIp.model_validate(data)
        except ValidationError:
            raise _malformed("the reserved IP has an unexpected shape", is_action=True) from None
        return ActionReply(action=action, message=message, reserved_ip=reserved_ip)
    if kind == "empty":
        if data is not None and not isinstance(data, dict):
            raise _malformed("expected an empty object", is_action=True)
        return ActionReply(action=action, message=message)
    if not isinstance(data, str):
        raise _malformed("expected a text", is_action=True)
    return ActionReply(action=action, message=message, text=data)


# -- summaries ------------------------------------------------------------------------------


def is_steady(status: str) -> bool:
    return status.strip().lower() in STEADY_STATUSES


def _times(value: int | None, nodes: int | None) -> int | None:
    if value is None:
        return None
    return value * nodes if nodes is not None else value


def _memory_times(memory: str | None, nodes: int | None) -> str | None:
    if memory is None or nodes is None:
        return memory
    match = _MEMORY.match(memory)
    if match is None:
        return memory
    number, unit = match.groups()
    total = float(number) * nodes
    shown = f"{total:g}" if not total.is_integer() else str(int(total))
    return f"{shown} {unit}" if unit else shown


def _image_text(image: E2EImageVersion | None) -> str | None:
    if image is None:
        return None
    words = " ".join(part for part in (image.name, image.version) if part)
    if image.id is None:
        return words or None
    return f"{words} (id {image.id})" if words else f"id {image.id}"


def _billing_text(plan: E2ESkuPlan | None) -> str | None:
    if plan is None:
        return None
    kind = plan.sku_type or "plan"
    if plan.committed_days:
        kind = f"{kind} {plan.committed_days} days"
    if plan.unit_price is None:
        return kind
    per = "/h" if (plan.sku_type or "").lower() == "hourly" else ""
    currency = f" {plan.currency}" if plan.currency else ""
    return f"{kind} · {plan.unit_price:g}{currency}{per}"


def to_summary(cluster: E2ECluster, project: str, *, location: str | None = None) -> ClusterSummary:
    """The neutral summary of a list item or a detail (both shapes' quirks absorbed)."""
    nodes = cluster.no_of_nodes
    specs, plan = cluster.specs, cluster.plan
    if isinstance(cluster, E2EClusterDetail):
        gpus, cpus, memory = cluster.total_gpu, cluster.total_cpu, cluster.total_memory
    else:
        gpus = _times(cluster.no_of_gpu, nodes)
        cpus = _times(cluster.no_of_cpu, nodes)
        memory = _memory_times(cluster.node_memory, nodes)
    return ClusterSummary(
        provider=PROVIDER,
        project=project,
        cluster_id=str(cluster.id),
        name=cluster.name,
        status=cluster.status,
        steady=is_steady(cluster.status),
        gpu_type=specs.gpu_card_type if specs else None,
        region=location or (plan.location if plan else None),
        billing=_billing_text(plan),
        nodes=nodes,
        gpus=gpus,
        cpus=cpus,
        memory=memory,
        image=_image_text(cluster.image_version),
        sku=specs.name if specs else None,
    )


# -- rules and input parsing ------------------------------------------------------------------

_FIELD_SPECS: dict[str, FieldSpec] = {
    "additional_nodes": FieldSpec(
        name="additional_nodes",
        label="Nodes to add",
        kind="int",
        required=True,
        hint="How many nodes to ADD (1 or more), not the new total.",
    ),
    "ssh_key_ids": FieldSpec(
        name="ssh_key_ids",
        label="SSH key ids",
        kind="int_list",
        required=True,
        hint="Comma-separated SSH key ids, e.g. 11,12. Replaces the keys on every node.",
    ),
    "image_version_id": FieldSpec(
        name="image_version_id",
        label="Image version id",
        kind="int",
        required=True,
        hint="The image_version_id to run, e.g. 5.",
    ),
    "reserved_ip_id": FieldSpec(
        name="reserved_ip_id",
        label="Reserved IP id",
        kind="int",
        required=True,
        hint="The id of a reserved IP of this project, e.g. 501.",
    ),
    "security_group_id": FieldSpec(
        name="security_group_id",
        label="Security group id",
        kind="int",
        required=True,
        hint="The id of the security group to remove, e.g. 601.",
    ),
    "security_groups_ids": FieldSpec(
        name="security_groups_ids",
        label="Security group ids",
        kind="int_list",
        required=True,
        hint="Comma-separated security group ids to add, e.g. 602,603.",
    ),
}

ACTION_FIELDS: dict[str, tuple[str, ...]] = {
    "update_ssh_keys": ("ssh_key_ids",),
    "update_image": ("image_version_id",),
    "restart_workers": (),
    "restart_cluster": (),
    "scale_cluster": ("additional_nodes",),
    "attach_ip": ("reserved_ip_id",),
    "detach_ip": ("reserved_ip_id",),
    "remove_security_group": ("security_group_id",),
    "add_security_group": ("security_groups_ids",),
}


def require_running(status: str) -> None:
    """Actions run on a Running cluster only."""
    if status != RUNNING:
        raise RuleViolation(
            f"the cluster is {status}; E2E runs actions only on a {RUNNING} cluster. "
            "Wait until it is Running and try again."
        )


def parse_cluster_id(cluster_id: str | int) -> int:
    text = str(cluster_id).strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise ChangeInputError(
        {"cluster_id": f"E2E cluster ids are positive whole numbers such as 101, not {text!r}"}
    )


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _parse_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a whole number, not {value!r}")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, e.g. 2; got {text!r}") from None


def _parse_int_list(name: str, value: Any) -> list[int]:
    if isinstance(value, str):
        parts: Sequence[Any] = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list | tuple):
        parts = value
    else:
        parts = [value]
    numbers = []
    for part in parts:
        try:
            numbers.append(_parse_int(name, part))
        except ValueError:
            raise ValueError(
                f"{name} takes comma-separated whole numbers such as 11,12; {part!r} is not one"
            ) from None
    return numbers


def parse_action_fields(action: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """Typed values for the action's fields; ChangeInputError names every bad one."""
    if action not in ACTION_FIELDS:
        raise ChangeInputError(
            {"action": f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}"}
        )
    wanted = ACTION_FIELDS[action]
    errors: dict[str, str] = {}
    values: dict[str, Any] = {}
    for name in wanted:
        value = raw.get(name)
        if _blank(value):
            errors[name] = f"{action} needs {name}: {_FIELD_SPECS[name].hint}"
            continue
        try:
            if _FIELD_SPECS[name].kind == "int_list":
                values[name] = _parse_int_list(name, value)
            else:
                values[name] = _parse_int(name, value)
        except ValueError as exc:
            errors[name] = str(exc)
    takes = ", ".join(wanted) or "no fields"
    for name, value in raw.items():
        if name != "action" and name not in wanted and not _blank(value):
            errors[name] = f"{action} does not take {name} (it takes {takes})"
    if errors:
        raise ChangeInputError(errors)
    return values


def check_field_rules(values: Mapping[str, Any]) -> None:
    """Provider rules on parsed values: at least one node to add, non-empty id lists,
    positive ids."""
    for name, value in values.items():
        if name == "additional_nodes":
            if value < 1:
                raise RuleViolation(
                    f"additional_nodes is the number of nodes to ADD and must be at least 1 "
                    f"(got {value}); to shrink a cluster, use the E2E console.",
                    field=name,
                )
        elif isinstance(value, list):
            if not value:
                raise RuleViolation(f"{name} needs at least one id, e.g. 11,12", field=name)
            bad = [item for item in value if item < 1]
            if bad:
                raise RuleViolation(
                    f"{name}: ids are positive numbers; {bad[0]} is not", field=name
                )
        elif value < 1:
            raise RuleViolation(f"{name} must be a positive id, not {value}", field=name)


# -- adapter --------------------------------------------------------------------------------


def _ids_text(ids: Sequence[Any]) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]"


def _preview(action: str, values: Mapping[str, Any], state: ClusterState) -> list[PreviewLine]:
    current = state.current
    nodes = current.get("no_of_nodes")
    node_text = f"({nodes} nodes)" if nodes is not None else ""
    if action == "scale_cluster":
        added = values["additional_nodes"]
        after = str(nodes + added) if isinstance(nodes, int) else f"+{added}"
        before = str(nodes) if isinstance(nodes, int) else None
        return [PreviewLine(field="scale_cluster:", before=before, after=after, unit="nodes")]
    if action == "update_image":
        before_image = current.get("image_version_id")
        return [
            PreviewLine(
                field="update_image: image",
                before=None if before_image is None else str(before_image),
                after=str(values["image_version_id"]),
            )
        ]
    if action == "update_ssh_keys":
        return [
            PreviewLine(
                field="update_ssh_keys: ssh keys",
                before=_ids_text(current.get("ssh_key_ids") or []),
                after=_ids_text(values["ssh_key_ids"]),
            )
        ]
    if action in ("restart_cluster", "restart_workers"):
        what = "restart all nodes" if action == "restart_cluster" else "restart the workers"
        return [
            PreviewLine(field=f"{action}:", before=state.summary.status, after=what, unit=node_text)
        ]
    if action == "attach_ip":
        ip = str(values["reserved_ip_id"])
        return [PreviewLine(field="attach_ip: reserved IP", before=None, after=ip)]
    if action == "detach_ip":
        ip = str(values["reserved_ip_id"])
        return [PreviewLine(field="detach_ip: reserved IP", before=ip, after="detached")]
    if action == "add_security_group":
        added = ", ".join(f"+{i}" for i in values["security_groups_ids"])
        return [PreviewLine(field="add_security_group: security groups", before=None, after=added)]
    group = str(values["security_group_id"])
    return [
        PreviewLine(field="remove_security_group: security group", before=group, after="removed")
    ]


def _current_of(cluster: E2EClusterDetail) -> dict[str, Any]:
    return {
        "status": cluster.status,
        "no_of_nodes": cluster.no_of_nodes,
        "image_version_id": cluster.image_version.id if cluster.image_version else None,
        "ssh_key_ids": cluster.ssh_key_ids,
    }


class E2EAdapter:
    """The provider-neutral face (bot.providers.base.ProviderAdapter) of one E2E project."""

    provider: ProviderName = PROVIDER

    def __init__(self, client: E2EClient, project: str) -> None:
        self.client = client
        self.project = project

    async def list_clusters(self) -> list[ClusterSummary]:
        items = await self.client.list_clusters()
        return [self._summary(item) for item in items]

    async def get_cluster(self, cluster_id: str) -> ClusterState:
        cluster = await self.client.get_cluster(parse_cluster_id(cluster_id))
        return ClusterState(summary=self._summary(cluster), current=_current_of(cluster))

    def actions(self) -> list[str]:
        return list(ACTIONS)

    def fields_for(self, action: str) -> list[FieldSpec]:
        if action not in ACTION_FIELDS:
            raise ChangeInputError(
                {"action": f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}"}
            )
        return [_FIELD_SPECS[name] for name in ACTION_FIELDS[action]]

    def plan(self, state: ClusterState, action: str, raw: Mapping[str, Any]) -> ChangePlan:
        if action not in ACTION_FIELDS:
            raise ChangeInputError(
                {"action": f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}"}
            )
        parse_cluster_id(state.summary.cluster_id)
        require_running(state.summary.status)
        values = parse_action_fields(action, raw)
        check_field_rules(values)
        request = ACTION_ADAPTER.validate_python({"action": action, **values})
        return ChangePlan(
            provider=PROVIDER,
            project=self.project,
            cluster_id=state.summary.cluster_id,
            cluster_name=state.summary.name,
            action=action,
            body=request.model_dump(mode="json"),
            kinds=[action],
            lines=_preview(action, values, state),
            fingerprint=self.fingerprint(state),
        )

    @staticmethod
    def fingerprint(state: ClusterState) -> dict[str, Any]:
        """What must not have changed between the preview and the execution."""
        current = state.current
        return {
            "status": state.summary.status,
            "no_of_nodes": current.get("no_of_nodes"),
            "image_version_id": current.get("image_version_id"),
            "ssh_key_ids": list(current.get("ssh_key_ids") or []),
        }

    async def apply(self, plan: ChangePlan) -> ApplyOutcome:
        cluster_id = parse_cluster_id(plan.cluster_id)
        try:
            request = ACTION_ADAPTER.validate_python(plan.body)
        except ValidationError:
            raise ChangeInputError(
                {"action": f"the stored request for {plan.action} is not a valid E2E action"}
            ) from None
        reply = await self.client.run_action(cluster_id, request)
        message = reply.text or reply.message
        if reply.cluster is not None:
            return ApplyOutcome(message=message, summary=self._summary(reply.cluster))
        try:
            cluster = await self.client.get_cluster(cluster_id)
        except ProviderError as exc:
            # The action succeeded; only the follow-up read failed.
            log.warning("e2e: %s done, but reading the cluster failed: %s", plan.action, exc)
            note = f"{message} (the cluster could not be read afterwards: {exc.user_message})"
            return ApplyOutcome(message=note, summary=None)
        return ApplyOutcome(message=message, summary=self._summary(cluster))

    async def aclose(self) -> None:
        await self.client.aclose()

    def _summary(self, cluster: E2ECluster) -> ClusterSummary:
        return to_summary(cluster, self.project, location=self.client.location)
