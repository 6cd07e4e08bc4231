"""E2E Networks TIR training clusters as a local HTTP server (SPEC §1.4).

Same paths, auth, envelope and error shapes as the real API (as far as they are
documented): ``apikey`` query parameter answered with E2E's 401 envelope, the Bearer token
with DRF's 403 ``{"detail"}``, an unknown project with ``{"status_code", "message"}``.
Changed clusters pass through a transitional status (Scaling, Restarting, Updating) for
``transition_seconds``, worked out from the elapsed time whenever the cluster is read.

Fault routes: ``list``, ``get``, ``action``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bot.local.simulators.base import (
    SimulatorServer,
    fault_after,
    fault_before,
    json_response,
)

PREFIX = "/myaccount/api/v1/gpu"
CLUSTERS = f"{PREFIX}/distributed_jobs_v2/cluster/"
RUNNING = "Running"
DEGRADED = "Failed"  # what /_sim/clusters/{id}/degrade sets unless told otherwise
DEFAULT_PER_PAGE = 10
CREATED_AT = "2026-01-15T10:30:00Z"

OWNER = {
    "id": 1001,
    "name": "John Doe",
    "email": "user@example.com",
    "username": "user@example.com",
    "is_primary_contact": True,
    "currency": "INR",
    "is_suspended": False,
}


@dataclass(frozen=True)
class SimSku:
    sku_id: int
    name: str
    sku_type: str
    gpu_card_type: str
    gpu: int  # per node, like cpu and memory_gb
    cpu: int
    memory_gb: int
    gpu_memory: int
    price_id: int
    unit_price: float


H100 = SimSku(
    sku_id=309,
    name="GDC.8xH10080-208.2000GB_SXM_v1",
    sku_type="GDC-8xH10080",
    gpu_card_type="H100",
    gpu=8,
    cpu=208,
    memory_gb=2000,
    gpu_memory=640,
    price_id=3416,
    unit_price=1995.2,
)
A100 = SimSku(
    sku_id=311,
    name="GDC.8xA10080-128.1000GB_SXM_v1",
    sku_type="GDC-8xA10080",
    gpu_card_type="A100",
    gpu=8,
    cpu=128,
    memory_gb=1000,
    gpu_memory=640,
    price_id=3420,
    unit_price=1270.0,
)
COMMITTED_DAYS = 30
COMMITTED_PRICE = 850000.0  # per node for the committed term (a sample value)

# id -> (name, version, framework, slug)
IMAGE_VERSIONS: dict[int, tuple[str, str, str, str]] = {
    2: ("Ubuntu Slurm", "v2-slurm25.11-ubuntu24.04", "Slurm", "ubuntu-slurm"),
    3: ("Ubuntu Slurm", "v3-slurm25.11-ubuntu24.04-cuda12.8", "Slurm", "ubuntu-slurm"),
    5: ("NeMo", "v5-nemo25.09-ubuntu24.04", "NeMo", "nemo"),
}
SSH_KEYS: dict[int, str] = {1001: "my-ssh-key", 1002: "ops-key", 11: "alice", 12: "bob"}
RESERVED_IPS: dict[int, str] = {501: "10.8.220.7", 502: "10.8.220.9"}
SECURITY_GROUPS: dict[int, str] = {601: "default", 602: "ssh-only", 603: "monitoring"}

# The fields each action takes: "int" (positive), "int_list" (non-empty, positive) or a
# fixed string value.
ACTION_FIELDS: dict[str, dict[str, str]] = {
    "update_ssh_keys": {"ssh_key_ids": "int_list"},
    "update_image": {"image_version_id": "int"},
    "restart_workers": {},
    "restart_cluster": {},
    "scale_cluster": {"additional_nodes": "int"},
    "attach_ip": {"reserved_ip_id": "int"},
    "detach_ip": {"reserved_ip_id": "int", "ip_type": "=reserved"},
    "remove_security_group": {"security_group_id": "int"},
    "add_security_group": {"security_groups_ids": "int_list"},
}


@dataclass
class SimCluster:
    id: int
    name: str
    project_id: int
    status: str
    nodes: int
    sku: SimSku = H100
    # "hourly", "committed" (COMMITTED_DAYS at COMMITTED_PRICE per node) or "none" (no plan)
    plan: str = "hourly"
    image_version_id: int = 2
    ssh_key_ids: list[int] = field(default_factory=lambda: [1001])
    security_group_ids: list[int] = field(default_factory=lambda: [601])
    reserved_ip_ids: list[int] = field(default_factory=list)
    # (the status it settles to, time.monotonic() when it does)
    pending: tuple[str, float] | None = None

    def settle(self, now: float) -> None:
        if self.pending is not None and now >= self.pending[1]:
            self.status = self.pending[0]
            self.pending = None


def envelope(status: int, message: str, errors: dict[str, Any]) -> dict[str, Any]:
    return {"code": status, "data": {}, "errors": errors, "message": message}


def _fault_body(status: int, message: str, *, field: str | None = None) -> dict[str, Any]:
    if field is not None:  # a validation error: DRF's errors keyed by the field
        return envelope(status, "Validation failed", {field: [message]})
    if status == 429:
        return {"errors": message, "status_code": 429}
    return envelope(status, message, {"detail": [message]})


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _field_errors(kind: str, value: Any) -> list[str]:
    if kind.startswith("="):
        return [] if value == kind[1:] else [f'"{value}" is not a valid choice.']
    if kind == "int":
        return [] if _is_id(value) else ["A positive integer is required."]
    if not isinstance(value, list) or not value:
        return ["A non-empty list of integers is required."]
    return [] if all(_is_id(v) for v in value) else ["Every item must be a positive integer."]


def validate_action(body: Any) -> dict[str, list[str]]:
    """The API's 400 errors for an action body (empty when it is well-formed)."""
    if not isinstance(body, dict):
        return {"non_field_errors": ["Expected a JSON object."]}
    action = body.get("action")
    if action is None:
        return {"action": ["This field is required."]}
    if action not in ACTION_FIELDS:
        return {"action": [f'"{action}" is not a valid choice.']}
    wanted = ACTION_FIELDS[action]
    errors: dict[str, list[str]] = {}
    for name, kind in wanted.items():
        if name not in body:
            errors[name] = ["This field is required."]
        elif problems := _field_errors(kind, body[name]):
            errors[name] = problems
    # E2E's documented curl sends every field with any action: the others are ignored.
    return errors


class E2ESimulator(SimulatorServer):
    name = "e2e"

    def __init__(
        self,
        api_key: str = "sim-e2e-apikey",
        auth_token: str = "sim-e2e-token",  # noqa: S107 -- the simulator's public credential
        projects: dict[int, str] | None = None,
        transition_seconds: float = 3.0,
    ) -> None:
        self.api_key = api_key
        self.auth_token = auth_token
        self.projects = dict(projects) if projects else {12345: "Delhi", 23456: "Chennai"}
        self.transition_seconds = transition_seconds
        self.clusters: dict[int, SimCluster] = {}
        super().__init__()
        self._seed()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{PREFIX}"

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(CLUSTERS, self._list)
        app.router.add_get(CLUSTERS + "{cluster_id}/", self._get)
        app.router.add_put(CLUSTERS + "{cluster_id}/", self._action)

    def reset(self) -> None:
        super().reset()
        self._seed()

    def _seed(self) -> None:
        delhi, chennai = 12345, 23456
        seeds = [
            SimCluster(101, "train-h100-a", delhi, RUNNING, 2),
            SimCluster(102, "train-h100-b", delhi, "Creating", 4),
            SimCluster(103, "train-a100-small", delhi, RUNNING, 1, sku=A100),
            SimCluster(104, "train-h100-c", delhi, RUNNING, 1, plan="none"),
            SimCluster(105, "eval-h100", delhi, RUNNING, 2, image_version_id=3),
            SimCluster(106, "train-a100-big", delhi, RUNNING, 4, sku=A100, plan="committed"),
            SimCluster(201, "train-chennai-a", chennai, RUNNING, 1),
        ]
        self.clusters = {c.id: c for c in seeds if c.project_id in self.projects}
        self._healthy_status: dict[int, str] = {}

    # -- controls (SimulatorServer hooks) ---------------------------------------------------
    def _control_target(self, cluster_id: str) -> SimCluster | None:
        cluster = self.clusters.get(int(cluster_id)) if cluster_id.isdigit() else None
        if cluster is not None:
            cluster.settle(time.monotonic())
        return cluster

    def degrade(self, cluster_id: str, status: str | None) -> bool:
        cluster = self._control_target(cluster_id)
        if cluster is None:
            return False
        self._healthy_status.setdefault(cluster.id, cluster.status)
        cluster.pending = None
        cluster.status = status or DEGRADED
        return True

    def restore(self, cluster_id: str) -> bool:
        cluster = self._control_target(cluster_id)
        if cluster is None:
            return False
        cluster.status = self._healthy_status.pop(cluster.id, RUNNING)
        return True

    def remove(self, cluster_id: str) -> bool:
        cluster = self._control_target(cluster_id)
        if cluster is None:
            return False
        self._healthy_status.pop(cluster.id, None)
        del self.clusters[cluster.id]
        return True

    # -- checks every request passes --------------------------------------------------------
    def _authorise(self, request: web.Request) -> int | web.Response:
        """The project id of an authorised request, or E2E's answer to a bad one."""
        if request.query.get("apikey") != self.api_key:
            return json_response(401, envelope(401, "Unauthorized", {"auth": ["invalid"]}))
        if request.headers.get("Authorization", "") != f"Bearer {self.auth_token}":
            return json_response(403, {"detail": "Authentication credentials were not provided."})
        not_found = json_response(400, {"status_code": 400, "message": "Project not found"})
        try:
            project_id = int(request.query.get("project_id", ""))
        except ValueError:
            return not_found
        location = self.projects.get(project_id)
        if location is None or request.query.get("location") != location:
            return not_found
        active_iam = request.query.get("active_iam")
        if active_iam is not None and not active_iam.isdigit():
            return json_response(400, {"status_code": 400, "message": "Invalid active_iam"})
        return project_id

    async def _enter(self, route: str, request: web.Request) -> tuple[int, Any] | web.Response:
        body = await self.record(route, request)
        project = self._authorise(request)
        if isinstance(project, web.Response):
            return project
        return project, body

    def _cluster(self, request: web.Request, project_id: int) -> SimCluster | None:
        try:
            cluster_id = int(request.match_info["cluster_id"])
        except ValueError:
            return None
        cluster = self.clusters.get(cluster_id)
        if cluster is None or cluster.project_id != project_id:
            return None
        cluster.settle(time.monotonic())
        return cluster

    @staticmethod
    def _not_found() -> web.Response:
        return json_response(404, envelope(404, "Cluster not found", {"detail": ["Not found."]}))

    # -- handlers ---------------------------------------------------------------------------
    async def _list(self, request: web.Request) -> web.StreamResponse:
        entered = await self._enter("list", request)
        if isinstance(entered, web.Response):
            return entered
        project_id, _ = entered
        fault = self.faults.take("list")
        if early := await fault_before(fault, _fault_body):
            return early
        try:
            page = int(request.query.get("page_no", "1"))
            per_page = int(request.query.get("per_page", str(DEFAULT_PER_PAGE)))
        except ValueError:
            page, per_page = 0, 0
        if page < 1 or per_page < 1:
            errors = {"page_no": ["page_no and per_page are positive integers."]}
            return json_response(400, envelope(400, "Bad Request", errors))
        now = time.monotonic()
        mine = sorted(
            (c for c in self.clusters.values() if c.project_id == project_id), key=lambda c: c.id
        )
        for cluster in mine:
            cluster.settle(now)
        shown = mine[(page - 1) * per_page : page * per_page]
        if late := fault_after(fault, _fault_body, request):
            return late
        return json_response(
            200,
            {
                "code": 200,
                "data": [self.list_item(c) for c in shown],
                "errors": {},
                "message": "Success",
                "total_page_number": math.ceil(len(mine) / per_page),
                "total_count": len(mine),
            },
        )

    async def _get(self, request: web.Request) -> web.StreamResponse:
        entered = await self._enter("get", request)
        if isinstance(entered, web.Response):
            return entered
        project_id, _ = entered
        fault = self.faults.take("get")
        if early := await fault_before(fault, _fault_body):
            return early
        cluster = self._cluster(request, project_id)
        if cluster is None:
            return self._not_found()
        if late := fault_after(fault, _fault_body, request):
            return late
        return json_response(200, self._ok(self.detail(cluster), "Success"))

    async def _action(self, request: web.Request) -> web.StreamResponse:
        entered = await self._enter("action", request)
        if isinstance(entered, web.Response):
            return entered
        project_id, body = entered
        fault = self.faults.take("action")
        if early := await fault_before(fault, _fault_body):
            return early
        cluster = self._cluster(request, project_id)
        if cluster is None:
            return self._not_found()
        if errors := validate_action(body):
            return json_response(400, envelope(400, "Bad Request", errors))
        if cluster.status != RUNNING:
            message = (
                f"Action not allowed: cluster is {cluster.status}; "
                "actions are allowed on a Running cluster only"
            )
            return json_response(412, envelope(412, message, {"detail": [message]}))
        if errors := self._check_references(cluster, body):
            return json_response(400, envelope(400, "Bad Request", errors))
        data, message = self._apply(cluster, body)
        if late := fault_after(fault, _fault_body, request):
            return late
        return json_response(200, self._ok(data, message))

    # -- actions ----------------------------------------------------------------------------
    def _check_references(self, cluster: SimCluster, body: dict[str, Any]) -> dict[str, list[str]]:
        """400 errors for ids that do not exist or do not fit the cluster's state."""
        action = body["action"]
        errors: dict[str, list[str]] = {}
        if action == "update_ssh_keys":
            unknown = [i for i in body["ssh_key_ids"] if i not in SSH_KEYS]
            if unknown:
                errors["ssh_key_ids"] = [f"SSH key {unknown[0]} not found."]
        elif action == "update_image" and body["image_version_id"] not in IMAGE_VERSIONS:
            errors["image_version_id"] = [f"Image version {body['image_version_id']} not found."]
        elif action in ("attach_ip", "detach_ip"):
            ip_id = body["reserved_ip_id"]
            holder = next((c for c in self.clusters.values() if ip_id in c.reserved_ip_ids), None)
            if ip_id not in RESERVED_IPS:
                errors["reserved_ip_id"] = [f"Reserved IP {ip_id} not found."]
            elif action == "attach_ip" and holder is not None:
                errors["reserved_ip_id"] = [f"Reserved IP {ip_id} is already attached."]
            elif action == "detach_ip" and holder is not cluster:
                errors["reserved_ip_id"] = [f"Reserved IP {ip_id} is not attached to this cluster."]
        elif action == "add_security_group":
            unknown = [i for i in body["security_groups_ids"] if i not in SECURITY_GROUPS]
            if unknown:
                errors["security_groups_ids"] = [f"Security group {unknown[0]} not found."]
        elif action == "remove_security_group":
            group = body["security_group_id"]
            if group not in cluster.security_group_ids:
                errors["security_group_id"] = [f"Security group {group} is not attached."]
        return errors

    def _start_transition(self, cluster: SimCluster, status: str) -> None:
        cluster.status = status
        cluster.pending = (RUNNING, time.monotonic() + self.transition_seconds)

    def _apply(self, cluster: SimCluster, body: dict[str, Any]) -> tuple[Any, str]:
        """Apply an action; the reply's data and message."""
        action = body["action"]
        if action == "update_ssh_keys":
            cluster.ssh_key_ids = list(body["ssh_key_ids"])
            return self.detail(cluster), "SSH keys updated"
        if action == "update_image":
            cluster.image_version_id = body["image_version_id"]
            self._start_transition(cluster, "Updating")
            return self.detail(cluster), "Image update started"
        if action in ("restart_workers", "restart_cluster"):
            self._start_transition(cluster, "Restarting")
            return self.detail(cluster), "Restart started"
        if action == "scale_cluster":
            cluster.nodes += body["additional_nodes"]
            self._start_transition(cluster, "Scaling")
            return self.detail(cluster), f"Adding {body['additional_nodes']} node(s)"
        if action == "attach_ip":
            cluster.reserved_ip_ids.append(body["reserved_ip_id"])
            return self.reserved_ip(cluster, body["reserved_ip_id"]), "Reserved IP attached"
        if action == "detach_ip":
            cluster.reserved_ip_ids.remove(body["reserved_ip_id"])
            return {}, "Reserved IP detached"
        if action == "add_security_group":
            for group in body["security_groups_ids"]:
                if group not in cluster.security_group_ids:
                    cluster.security_group_ids.append(group)
            return "Security groups added successfully", "Success"
        cluster.security_group_ids.remove(body["security_group_id"])
        return "Security group removed successfully", "Success"

    # -- shapes -----------------------------------------------------------------------------
    @staticmethod
    def _ok(data: Any, message: str) -> dict[str, Any]:
        return {"code": 200, "data": data, "errors": {}, "message": message}

    def _sku_details(self, cluster: SimCluster) -> dict[str, Any]:
        sku = cluster.sku
        details: dict[str, Any] = {
            "specs": {
                "sku_id": sku.sku_id,
                "name": sku.name,
                "series": "GPU",
                "cpu": sku.cpu,
                "gpu": sku.gpu,
                "memory": sku.memory_gb,
                "ephemeral_storage": 0,
                "gpu_memory": sku.gpu_memory,
                "is_free": False,
                "is_active": True,
                "local_storage_in_gb": 0,
                "sku_type": sku.sku_type,
                "gpu_card_type": sku.gpu_card_type,
                "category": "distributed_job",
                "variant": "e2e",
                "no_of_nodes": 1,
            },
        }
        plan = self._plan(cluster)
        if plan is not None:
            details["plan"] = plan
        return details

    def _plan(self, cluster: SimCluster) -> dict[str, Any] | None:
        sku = cluster.sku
        if cluster.plan == "none":
            return None
        committed = cluster.plan == "committed"
        return {
            "sku_item_price_id": sku.price_id + 1 if committed else sku.price_id,
            "sku_type": "committed" if committed else "hourly",
            "committed_days": COMMITTED_DAYS if committed else 0,
            "unit_price": COMMITTED_PRICE if committed else sku.unit_price,
            "currency": "INR",
            "is_active": True,
            "description": f"{'Committed' if committed else 'Hourly'} Compute Instance: "
            "distributed_job",
            "location": self.projects[cluster.project_id],
        }

    @staticmethod
    def _image(cluster: SimCluster) -> dict[str, Any]:
        name, version, framework, slug = IMAGE_VERSIONS[cluster.image_version_id]
        return {
            "id": cluster.image_version_id,
            "version": version,
            "description": "",
            "tags": [],
            "name": name,
            "slug_name": slug,
            "framework": framework,
            "is_internal": False,
        }

    def _common(self, cluster: SimCluster) -> dict[str, Any]:
        return {
            "id": cluster.id,
            "name": cluster.name,
            "created_by": dict(OWNER),
            "no_of_nodes": cluster.nodes,
            "created_at": CREATED_AT,
            "status": cluster.status,
            "sku_details": self._sku_details(cluster),
            "private_cloud_name": None,
            "private_cloud_id": None,
            "has_local_storage": False,
            "image_version": self._image(cluster),
            "available_gpu": 0,
            "available_cpu": 0,
        }

    def list_item(self, cluster: SimCluster) -> dict[str, Any]:
        """The LIST shape: per-node counts as strings, memory as ``"2000GB"``."""
        return {
            **self._common(cluster),
            "no_of_gpu": str(cluster.sku.gpu),
            "no_of_cpu": str(cluster.sku.cpu),
            "node_memory": f"{cluster.sku.memory_gb}GB",
            "available_memory": "0GB",
        }

    def detail(self, cluster: SimCluster) -> dict[str, Any]:
        """The DETAIL shape: cluster totals as integers, memory as ``"2000 GB"``."""
        return {
            **self._common(cluster),
            "total_gpu": cluster.sku.gpu * cluster.nodes,
            "total_cpu": cluster.sku.cpu * cluster.nodes,
            "total_memory": f"{cluster.sku.memory_gb * cluster.nodes} GB",
            "available_memory": "0 GB",
            "worker_nodes": [
                {"name": f"{cluster.name}-worker-{n}", "status": cluster.status}
                for n in range(1, cluster.nodes + 1)
            ],
            "local_storage_per_node": None,
            "image_pull_policy": "IfNotPresent",
            "ssh_keys": [
                {"pk": key, "label": SSH_KEYS[key], "ssh_key": f"ssh-ed25519 AAAA{key} sim"}
                for key in cluster.ssh_key_ids
            ],
            **self._access(cluster),
        }

    def _access(self, cluster: SimCluster) -> dict[str, Any]:
        """How the cluster is reached and guarded — the detail's fields after ``ssh_keys``
        (where E2E's documented example is cut off): the attached reserved IP (the login
        node's public address), the security groups, and the body that would clone it."""
        reserved = cluster.reserved_ip_ids[0] if cluster.reserved_ip_ids else None
        return {
            "ssh_public_ip": RESERVED_IPS[reserved] if reserved is not None else None,
            "has_floating_ip": reserved is not None,
            "reserve_ip": self.reserved_ip(cluster, reserved) if reserved is not None else None,
            "security_groups": [
                {"id": group, "name": SECURITY_GROUPS[group]}
                for group in cluster.security_group_ids
            ],
            "clone_data": {
                "name": cluster.name,
                "image_version_id": cluster.image_version_id,
                "ssh_key_ids": list(cluster.ssh_key_ids),
                "security_group_id": (
                    cluster.security_group_ids[0] if cluster.security_group_ids else None
                ),
                "sku_id": cluster.sku.sku_id,
                "no_of_nodes": cluster.nodes,
            },
        }

    def reserved_ip(self, cluster: SimCluster, ip_id: int) -> dict[str, Any]:
        address = RESERVED_IPS[ip_id]
        return {
            "id": ip_id,
            "ip_address": address,
            "service_name": cluster.name,
            "created_at": CREATED_AT,
            "status": "Attached",
            "reserved_by": {k: OWNER[k] for k in ("id", "name", "email", "username")},
            "service_type": "distributed_job",
            "service_id": cluster.id,
            "location": self.projects[cluster.project_id],
            "egress_ip": address,
            "myaccount_project_id": cluster.project_id,
            "vpc_details": {},
            "connection_status": "Connected",
        }
