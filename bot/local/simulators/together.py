"""A Together AI Instant Clusters simulator: ``GET /v1/compute/clusters``,
``GET /v1/compute/clusters/{cluster_id}`` and ``PUT /v1/compute/clusters/{cluster_id}``
with Bearer auth, Together's error shape, the update rules of SPEC §1.1, and clusters that
move through provisioning statuses after a change; node remediations under
``…/instances/{instance_id}/remediations`` (see together_remediations).

Status progress is computed from the elapsed time whenever a cluster is read, so there is
no background task to manage. Route names for faults: ``list``, ``get``, ``update``,
``remediations`` (list and get), ``remediation_decision`` (approve, reject, cancel).
Controls besides the shared ones: ``POST /_sim/clusters/{id}/remediations`` (body
``NewRemediation``) and ``POST /_sim/remediations/{id}/resolve`` (body ``Resolution``).
"""

from __future__ import annotations

import base64
import copy
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from bot.local.simulators.base import (
    EFFECTS,
    FaultKind,
    SimulatorServer,
    fault_after,
    fault_before,
    json_response,
)
from bot.local.simulators.together_remediations import (
    DEFAULT_PAGE_SIZE,
    DecisionRefused,
    NewRemediation,
    RemediationDesk,
    Resolution,
    requested_states,
)

GPUS_PER_NODE = 8
UPDATE_FIELDS = (
    "cluster_type",
    "num_gpus",
    "num_reserved_gpus",
    "num_preemptible_gpus",
    "num_capacity_pool_gpus",
    "reservation_end_time",
)
_COUNT_FIELDS = UPDATE_FIELDS[1:5]
# The rest of the update body the official SDK sends (gpuops does not): each alone is an
# update. Their shapes: specs/together-compute-clusters.DERIVED-from-sdk.yaml.
_SDK_UPDATE_FIELDS = ("add_ons", "cluster_config")
_ADD_ON_KEYS = ("dashboard", "headlamp", "ingress", "slurm_web", "torchpass")
_LOAD_BALANCERS = ("NONE", "TRAEFIK", "NGINX", "ISTIO")
_TOGGLE_CONFIG_KEYS = ("ingress", "observability")
_FLAG_CONFIG_KEYS = ("jumphost_enabled", "kubernetes_dashboard_enabled", "ssh_ca_enabled")
_TEXT_CONFIG_KEYS = ("gpu_operator_version", "network_operator_version")
_SLURM_SCRIPTS = (
    "controller_epilog",
    "controller_prolog",
    "extra_slurm_conf",
    "login_init_script",
    "nodeset_init_script",
    "worker_epilog",
    "worker_prolog",
)
REMEDIATIONS = "/v1/compute/clusters/{cluster_id}/instances/{instance_id}/remediations"
DEGRADED = "Degraded"
CLUSTER_TYPES = ("KUBERNETES", "SLURM")
PREPAID = ("RESERVED", "SCHEDULED_CAPACITY")

# (status, cluster phase) a changed cluster passes through, evenly over transition_seconds.
_PROGRESS: tuple[tuple[str, str], ...] = (
    ("WaitingForDataPlaneNodes", "CLUSTER_PHASE_WAITING_FOR_DATA_PLANE_NODES"),
    ("InstallingDrivers", "CLUSTER_PHASE_INSTALLING_DRIVERS"),
    ("Ready", "CLUSTER_PHASE_READY"),
)

_NODE_SHAPES: dict[str, tuple[int, float]] = {  # gpu type → (cpu cores, memory GiB) per node
    "H100_SXM": (208, 1800.0),
    "H200_SXM": (208, 2000.0),
    "B200_SXM": (224, 2900.0),
}


def _ts(value: datetime) -> str:
    return value.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def error_body(
    status: int, message: str, code: str | None = None, *, field: str | None = None
) -> dict[str, Any]:
    """Together's error shape (``ErrorData``: ``param`` names the request field at fault)."""
    if status == 429:
        kind = "rate_limit_error"
    elif status >= 500:
        kind = "server_error"
    else:
        kind = "invalid_request_error"
    error: dict[str, Any] = {"message": message, "type": kind}
    if code is not None:
        error["code"] = code
    if field is not None:
        error["param"] = field
    return {"error": error}


def _error(status: int, message: str, code: str | None = None) -> web.Response:
    return json_response(status, error_body(status, message, code))


class UpdateRejected(Exception):
    def __init__(self, message: str, code: str = "invalid_parameter") -> None:
        self.message = message
        self.code = code
        super().__init__(message)


@dataclass
class _Transition:
    started: float  # monotonic
    started_at: datetime
    reached: int = -1  # index into _PROGRESS already recorded


@dataclass
class _Effect:
    kind: FaultKind
    seconds: float
    nodes: list[str]  # the node ids the change added
    settled: float | None = None  # monotonic, once the cluster was Ready again


# -- seed data -----------------------------------------------------------------------------
def _kube_config(cluster_id: str) -> str:
    text = (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: {cluster_id}\n  cluster:\n"
        "    server: https://kubernetes.default.svc:6443\n"
        f"contexts:\n- name: {cluster_id}\n  context: {{cluster: {cluster_id}, user: admin}}\n"
        f"current-context: {cluster_id}\n"
        "users:\n- name: admin\n  user: {token: sim-kube-token}\n"
    )
    return base64.b64encode(text.encode()).decode()


def _node_phases(at: datetime, *, running: bool) -> list[dict[str, Any]]:
    phases = [
        {"phase": "NODE_PHASE_PENDING", "transition_time": _ts(at)},
        {"phase": "NODE_PHASE_BOOTING", "transition_time": _ts(at + timedelta(minutes=2))},
    ]
    if running:
        phases.append(
            {"phase": "NODE_PHASE_RUNNING", "transition_time": _ts(at + timedelta(minutes=9))}
        )
    return phases


def _worker_node(
    cluster_id: str, index: int, gpu_type: str, at: datetime, *, running: bool
) -> dict[str, Any]:
    cores, memory = _NODE_SHAPES.get(gpu_type, (96, 1000.0))
    name = f"{cluster_id}-gpu-{index}"
    return {
        "host_name": name,
        "node_name": name,
        "memory_gib": memory,
        "networks": [f"10.{20 + index}.0.{10 + index}"],
        "node_id": f"node-{cluster_id}-{index}",
        "instance_id": f"i-{cluster_id}-{index}",
        "num_cpu_cores": cores,
        "num_gpus": GPUS_PER_NODE,
        "phase_transitions": _node_phases(at, running=running),
        "status": "Ready" if running else "NotReady",
        "auto_remediation_enabled": True,
        "ephemeral_storage": "28Ti",
        "ib_hca_count": 8,
        "ib_hca_type": "ConnectX-7",
        "nvswitch_count": 4,
        "nvswitch_type": "NVSwitch-3",
        "marked_for_deletion": False,
    }


def _control_plane(cluster_id: str, count: int, at: datetime) -> list[dict[str, Any]]:
    nodes = []
    for index in range(count):
        name = f"{cluster_id}-cp-{index}"
        nodes.append(
            {
                "host_name": name,
                "node_name": name,
                "memory_gib": 32.0,
                "network": f"10.10.0.{10 + index}",
                "node_id": f"cp-{cluster_id}-{index}",
                "num_cpu_cores": 8,
                "phase_transitions": _node_phases(at, running=True),
                "status": "Ready",
            }
        )
    return nodes


def _cluster_phases(at: datetime, until: str) -> list[dict[str, Any]]:
    order = (
        "CLUSTER_PHASE_QUEUED",
        "CLUSTER_PHASE_WAITING_FOR_CONTROL_PLANE_NODES",
        "CLUSTER_PHASE_WAITING_FOR_DATA_PLANE_NODES",
        "CLUSTER_PHASE_INSTALLING_DRIVERS",
        "CLUSTER_PHASE_RUNNING_ACCEPTANCE_TESTS",
        "CLUSTER_PHASE_READY",
    )
    phases = []
    for step, phase in enumerate(order[: order.index(until) + 1]):
        phases.append({"phase": phase, "transition_time": _ts(at + timedelta(minutes=4 * step))})
    return phases


def _seed_cluster(
    cluster_id: str,
    *,
    name: str,
    billing: str,
    cluster_type: str,
    gpu_type: str,
    num_gpus: int,
    project_id: str,
    now: datetime,
    region: str = "us-central-8",
    num_reserved_gpus: int = 0,
    age: timedelta = timedelta(days=10),
    booting: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    created = now - age
    nodes = [
        _worker_node(cluster_id, i, gpu_type, created, running=not booting)
        for i in range(math.ceil(num_gpus / GPUS_PER_NODE))
    ]
    cluster: dict[str, Any] = {
        "cluster_id": cluster_id,
        "cluster_name": name,
        "billing_type": billing,
        "cluster_type": cluster_type,
        "gpu_type": gpu_type,
        "region": region,
        "project_id": project_id,
        "ums_project_id": project_id,
        "ums_org_id": "org-gpuops-sim",
        "status": "WaitingForDataPlaneNodes" if booting else "Ready",
        "num_gpus": num_gpus,
        "num_reserved_gpus": num_reserved_gpus,
        "num_capacity_pool_gpus": 0,
        "desired_preemptible_gpus": 0,
        "allocated_preemptible_gpus": 0,
        "num_cpu_workers": 0,
        "cuda_version": "12.6",
        "nvidia_driver_version": "560",
        "nvidia_driver_version_id": f"{region}-cuda-12.6-560",
        "os_image": "ubuntu-22.04-cuda-12.6",
        "kube_config": _kube_config(cluster_id),
        "control_plane_ready": True,
        "control_plane_nodes": _control_plane(
            cluster_id, 3 if cluster_type == "KUBERNETES" else 1, created
        ),
        "gpu_worker_nodes": nodes,
        "deleted_gpu_worker_nodes": [],
        "phase_transitions": _cluster_phases(
            created,
            "CLUSTER_PHASE_WAITING_FOR_DATA_PLANE_NODES" if booting else "CLUSTER_PHASE_READY",
        ),
        "node_lifecycle_events": [],
        "volumes": [
            {
                "size_tib": 10,
                "status": "bound",
                "volume_id": f"vol-{cluster_id}",
                "volume_name": f"{name}-shared",
            }
        ],
        "add_ons": [],
        "cluster_config": {
            "load_balancer": "NONE",
            "jumphost_enabled": cluster_type == "SLURM",
            "kubernetes_dashboard_enabled": cluster_type == "KUBERNETES",
            "observability": {"enabled": True},
            "ssh_ca_enabled": False,
        },
        "install_traefik": False,
        "is_in_substrate": False,
        "machine_cluster_id": f"mc-{cluster_id}",
        "created_at": _ts(created),
    }
    if not booting:
        cluster["first_ready_at"] = _ts(created + timedelta(minutes=20))
    if cluster_type == "KUBERNETES":
        cluster["add_ons"] = [
            {
                "add_on_type": "dashboard",
                "name": "kubernetes-dashboard",
                "config": {"dashboard": {"enabled": True}},
                "state": {"dashboard": {}},
            }
        ]
    else:
        cluster["slurm_shm_size_gib"] = 64
    cluster.update(extra)
    return cluster


def seed_clusters(now: datetime) -> dict[str, dict[str, Any]]:
    """The clusters every simulator starts with (and returns to on reset)."""
    clusters = [
        _seed_cluster(
            "tc-h100-reserved",
            name="train-h100-reserved",
            billing="RESERVED",
            cluster_type="KUBERNETES",
            gpu_type="H100_SXM",
            num_gpus=16,
            num_reserved_gpus=16,
            project_id="proj-123",
            now=now,
            reservation_start_time=_ts(now - timedelta(days=10)),
            # a year away: a fixed end such as 2027-06-30 is earlier, so it decommissions
            reservation_end_time=_ts(now + timedelta(days=365)),
            duration_hours=375 * 24,
            oidc_config={
                "client_id": "gpuops-sim",
                "group_claim": "groups",
                "group_prefix": "oidc:",
                "issuer_url": "https://idp.cluster.local",
                "username_claim": "email",
                "username_prefix": "oidc:",
            },
        ),
        _seed_cluster(
            "tc-h200-ondemand",
            name="infer-h200",
            billing="ON_DEMAND",
            cluster_type="SLURM",
            gpu_type="H200_SXM",
            num_gpus=8,
            project_id="proj-123",
            now=now,
            region="us-west-2",
        ),
        _seed_cluster(
            "tc-b200-pool",
            name="train-b200-pool",
            billing="RESERVED",
            cluster_type="KUBERNETES",
            gpu_type="B200_SXM",
            num_gpus=32,
            num_reserved_gpus=16,
            project_id="proj-123",
            now=now,
            capacity_pool_id="pool-b200-1",
            num_capacity_pool_gpus=16,
            reservation_start_time=_ts(now - timedelta(days=5)),
            reservation_end_time=_ts(now + timedelta(days=25)),
        ),
        _seed_cluster(
            "tc-h100-sched",
            name="eval-h100-window",
            billing="SCHEDULED_CAPACITY",
            cluster_type="KUBERNETES",
            gpu_type="H100_SXM",
            num_gpus=16,
            project_id="proj-123",
            now=now,
            age=timedelta(days=2),
            reservation_start_time=_ts(now - timedelta(days=2)),
            reservation_end_time=_ts(now + timedelta(days=5)),
        ),
        _seed_cluster(
            "tc-booting",
            name="new-h100",
            billing="ON_DEMAND",
            cluster_type="KUBERNETES",
            gpu_type="H100_SXM",
            num_gpus=8,
            project_id="proj-123",
            now=now,
            age=timedelta(minutes=10),
            booting=True,
        ),
        _seed_cluster(
            "tc-other-proj",
            name="other-team-h100",
            billing="ON_DEMAND",
            cluster_type="KUBERNETES",
            gpu_type="H100_SXM",
            num_gpus=8,
            project_id="proj-999",
            now=now,
        ),
    ]
    return {c["cluster_id"]: c for c in clusters}


# -- validation of an update body ----------------------------------------------------------
def _int_field(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise UpdateRejected(f"{name} must be an integer")
    if value < 0:
        raise UpdateRejected(f"{name} must be a non-negative integer")
    return value


def _end_time(body: dict[str, Any]) -> datetime | None:
    value = body.get("reservation_end_time")
    if value is None:
        return None
    if not isinstance(value, str):
        raise UpdateRejected("reservation_end_time must be an RFC 3339 date-time string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise UpdateRejected(
            f"reservation_end_time {value!r} is not an RFC 3339 date-time"
        ) from None
    if parsed.tzinfo is None:
        raise UpdateRejected("reservation_end_time must include a time zone offset")
    return parsed


def _toggle(value: Any, name: str) -> dict[str, Any]:
    """``{"enabled": bool}`` (an empty object keeps the current setting)."""
    if not isinstance(value, dict) or set(value) - {"enabled"}:
        raise UpdateRejected(f'{name} must be an object {{"enabled": true|false}}')
    if "enabled" in value and not isinstance(value["enabled"], bool):
        raise UpdateRejected(f"{name}.enabled must be a boolean")
    return value


def _add_ons(cluster: dict[str, Any], value: Any) -> list[dict[str, Any]]:
    """The cluster's add-ons with each entry's config merged in; an entry must name an
    add-on the cluster has."""
    if not isinstance(value, list):
        raise UpdateRejected("add_ons must be an array")
    add_ons: list[dict[str, Any]] = copy.deepcopy(cluster["add_ons"])
    by_name = {add_on["name"]: add_on for add_on in add_ons}
    for entry in value:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise UpdateRejected("each add_ons entry needs a name")
        unknown = sorted(set(entry) - {"name", "config"})
        if unknown:
            raise UpdateRejected(f"unknown field(s) in add_ons entry: {', '.join(unknown)}")
        add_on = by_name.get(entry["name"])
        if add_on is None:
            names = ", ".join(sorted(by_name)) or "none"
            raise UpdateRejected(
                f"add-on {entry['name']!r} does not exist on this cluster (its add-ons: {names})"
            )
        config = entry.get("config") or {}
        if not isinstance(config, dict) or set(config) - set(_ADD_ON_KEYS):
            raise UpdateRejected(f"add_ons config keys must be among {', '.join(_ADD_ON_KEYS)}")
        for key, toggle in config.items():
            add_on["config"][key] = {**add_on["config"].get(key, {}), **_toggle(toggle, key)}
    return add_ons


def _cluster_config(cluster: dict[str, Any], value: Any) -> dict[str, Any]:
    """The cluster's config with ``value`` merged in (``load_balancer`` is required)."""
    if not isinstance(value, dict):
        raise UpdateRejected("cluster_config must be an object")
    known = (
        "load_balancer",
        "slurm_startup_scripts",
        *_TOGGLE_CONFIG_KEYS,
        *_FLAG_CONFIG_KEYS,
        *_TEXT_CONFIG_KEYS,
    )
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise UpdateRejected(f"unknown field(s) in cluster_config: {', '.join(unknown)}")
    if value.get("load_balancer") not in _LOAD_BALANCERS:
        raise UpdateRejected(
            f"cluster_config.load_balancer is required: one of {', '.join(_LOAD_BALANCERS)}"
        )
    for key in _TOGGLE_CONFIG_KEYS:
        if key in value:
            _toggle(value[key], f"cluster_config.{key}")
    for key in _FLAG_CONFIG_KEYS:
        if key in value and not isinstance(value[key], bool):
            raise UpdateRejected(f"cluster_config.{key} must be a boolean")
    for key in _TEXT_CONFIG_KEYS:
        if key in value and not isinstance(value[key], str):
            raise UpdateRejected(f"cluster_config.{key} must be a string")
    scripts = value.get("slurm_startup_scripts", {})
    if not isinstance(scripts, dict) or set(scripts) - set(_SLURM_SCRIPTS):
        raise UpdateRejected(
            f"cluster_config.slurm_startup_scripts keys must be among {', '.join(_SLURM_SCRIPTS)}"
        )
    return {**copy.deepcopy(cluster["cluster_config"]), **copy.deepcopy(value)}


def validate_update(cluster: dict[str, Any], body: Any, now: datetime) -> dict[str, Any]:
    """Check an update body as Together does; the normalised changes, or UpdateRejected."""
    if not isinstance(body, dict):
        raise UpdateRejected("request body must be a JSON object", code="invalid_request_body")
    unknown = sorted(set(body) - set(UPDATE_FIELDS) - set(_SDK_UPDATE_FIELDS))
    if unknown:
        raise UpdateRejected(f"unknown field(s) in update: {', '.join(unknown)}")
    changes = {k: v for k, v in body.items() if v is not None}
    if "cluster_type" in changes and changes["cluster_type"] not in CLUSTER_TYPES:
        raise UpdateRejected(f"cluster_type must be one of {', '.join(CLUSTER_TYPES)}")
    if changes.get("add_ons") == []:  # names no add-on: changes nothing
        del changes["add_ons"]
    if not changes:
        raise UpdateRejected("update must set at least one field")
    if "add_ons" in changes:
        changes["add_ons"] = _add_ons(cluster, changes["add_ons"])
    if "cluster_config" in changes:
        changes["cluster_config"] = _cluster_config(cluster, changes["cluster_config"])
    counts = {name: _int_field(body, name) for name in _COUNT_FIELDS}
    end = _end_time(body)
    for name in ("num_gpus", "num_preemptible_gpus", "num_capacity_pool_gpus"):
        value = counts[name]
        if value is not None and value % GPUS_PER_NODE:
            raise UpdateRejected(f"{name} must be a multiple of 8")
    _check_capacity_pool(cluster, counts)
    if counts["num_reserved_gpus"] is not None and cluster["billing_type"] != "RESERVED":
        raise UpdateRejected("num_reserved_gpus is only applicable to RESERVED clusters")
    if end is not None:
        if cluster["billing_type"] not in PREPAID:
            raise UpdateRejected("reservation_end_time is only accepted for prepaid clusters")
        if end <= now:
            raise UpdateRejected("reservation_end_time must be in the future")
        changes["reservation_end_time"] = _ts(end)
    return changes


def _check_capacity_pool(cluster: dict[str, Any], counts: dict[str, int | None]) -> None:
    pool = counts["num_capacity_pool_gpus"]
    num_gpus = counts["num_gpus"] if counts["num_gpus"] is not None else cluster["num_gpus"]
    if pool is not None and not cluster.get("capacity_pool_id"):
        raise UpdateRejected(
            "num_capacity_pool_gpus is only applicable to clusters created with capacity_pool_id"
        )
    resulting_pool = pool if pool is not None else cluster.get("num_capacity_pool_gpus", 0)
    if cluster.get("capacity_pool_id") and resulting_pool > num_gpus:
        raise UpdateRejected("num_capacity_pool_gpus must be less than or equal to num_gpus")


def _shape(cluster: dict[str, Any]) -> tuple[Any, ...]:
    """What provisioning has to catch up with after a change."""
    return tuple(
        cluster.get(name)
        for name in (
            "cluster_type",
            "num_gpus",
            "num_reserved_gpus",
            "desired_preemptible_gpus",
            "num_capacity_pool_gpus",
        )
    )


# -- the server ----------------------------------------------------------------------------
class TogetherSimulator(SimulatorServer):
    name = "together"

    def __init__(
        self,
        api_key: str = "sim-together-key",
        transition_seconds: float = 3.0,
        remediation_seconds: float | None = None,
        stepwise: bool = False,
    ) -> None:
        self.api_key = api_key
        self.transition_seconds = transition_seconds
        # A read advances a transition by at most one status, however late it comes: a test
        # of what a poller sees on the way gets every status on a busy machine too.
        self.stepwise = stepwise
        self.clusters: dict[str, dict[str, Any]] = {}
        self._transitions: dict[str, _Transition] = {}
        self._healthy_status: dict[str, str] = {}
        self._effects: dict[str, _Effect] = {}  # a change's fault, acted on once it settles
        self.remediations = RemediationDesk(
            transition_seconds if remediation_seconds is None else remediation_seconds
        )
        super().__init__()
        self._seed()

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the Together simulator is not started")
        return f"http://127.0.0.1:{self.port}/v1"

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/compute/clusters", self._list)
        app.router.add_get("/v1/compute/clusters/{cluster_id}", self._get)
        app.router.add_put("/v1/compute/clusters/{cluster_id}", self._update)
        app.router.add_get(REMEDIATIONS, self._list_remediations)
        app.router.add_get(REMEDIATIONS + "/{remediation_id}", self._get_remediation)
        for verb in ("approve", "reject", "cancel"):
            app.router.add_post(
                REMEDIATIONS + "/{remediation_id}/" + verb, self._decision_handler(verb)
            )
        app.router.add_post("/_sim/clusters/{cluster_id}/remediations", self._post_remediation)
        app.router.add_post("/_sim/remediations/{remediation_id}/resolve", self._post_resolve)

    def reset(self) -> None:
        super().reset()
        self._seed()

    def _seed(self) -> None:
        self.clusters = seed_clusters(datetime.now(UTC))
        self._transitions = {}
        self._healthy_status = {}
        self._effects = {}
        self.remediations.clear()

    # -- controls (SimulatorServer hooks and the remediation ones) -----------------------
    def degrade(self, cluster_id: str, status: str | None) -> bool:
        if cluster_id not in self.clusters:
            return False
        self.view(cluster_id)
        cluster = self.clusters[cluster_id]
        self._healthy_status.setdefault(cluster_id, cluster["status"])
        cluster["status"] = status or DEGRADED
        return True

    def restore(self, cluster_id: str) -> bool:
        if cluster_id not in self.clusters:
            return False
        self.clusters[cluster_id]["status"] = self._healthy_status.pop(cluster_id, "Ready")
        return True

    def remove(self, cluster_id: str) -> bool:
        self._transitions.pop(cluster_id, None)
        self._healthy_status.pop(cluster_id, None)
        return self.clusters.pop(cluster_id, None) is not None

    def create_remediation(self, cluster_id: str, spec: NewRemediation) -> dict[str, Any]:
        """A remediation awaiting approval on one of the cluster's nodes (KeyError if none)."""
        return self.remediations.create(self.view(cluster_id), spec)

    async def _post_remediation(self, request: web.Request) -> web.Response:
        cluster_id = request.match_info["cluster_id"]
        if cluster_id not in self.clusters:
            return self._not_found(cluster_id)
        try:
            spec = NewRemediation.model_validate(await _json_or_empty(request))
            return json_response(200, self.create_remediation(cluster_id, spec))
        except ValidationError as exc:
            return _error(400, str(exc.errors()[0]["msg"]), "invalid_parameter")
        except DecisionRefused as refused:
            return _error(refused.status, refused.message, refused.code)

    async def _post_resolve(self, request: web.Request) -> web.Response:
        remediation_id = request.match_info["remediation_id"]
        if remediation_id not in self.remediations.items:
            return _error(404, f"remediation {remediation_id} not found", "not_found")
        resolution = Resolution.model_validate(await _json_or_empty(request))
        return json_response(200, self.remediations.resolve(remediation_id, resolution))

    # -- remediation handlers -------------------------------------------------------------
    async def _list_remediations(self, request: web.Request) -> web.StreamResponse:
        await self.record("remediations", request)
        refused = await self._refuse("remediations", request)
        if refused is not None:
            return refused
        cluster_id = request.match_info["cluster_id"]
        if cluster_id not in self.clusters:
            return self._not_found(cluster_id)
        try:
            page_size = int(request.query.get("page_size", DEFAULT_PAGE_SIZE))
            page = self.remediations.page(
                cluster_id,
                request.match_info["instance_id"],
                requested_states(request.query.getall("state", [])),
                max(1, page_size),
                request.query.get("page_token", ""),
            )
        except ValueError:
            return _error(400, "page_size must be an integer", "invalid_parameter")
        except DecisionRefused as bad:
            return _error(bad.status, bad.message, bad.code)
        return json_response(200, page)

    async def _get_remediation(self, request: web.Request) -> web.StreamResponse:
        await self.record("remediations", request)
        refused = await self._refuse("remediations", request)
        if refused is not None:
            return refused
        item = self._remediation(request)
        if item is None:
            return self._remediation_not_found(request)
        return json_response(200, self.remediations.view(item["id"]))

    def _decision_handler(
        self, verb: str
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._decide(verb, request)

        return handle

    async def _decide(self, verb: str, request: web.Request) -> web.StreamResponse:
        body = await self.record("remediation_decision", request)
        if not self._authorized(request):
            return self._unauthorized()
        fault = self.faults.take("remediation_decision")
        early = await fault_before(fault, error_body)
        if early is not None:
            return early
        item = self._remediation(request)
        if item is None:
            return self._remediation_not_found(request)
        try:
            decided = self.remediations.decide(item, verb, body)
        except DecisionRefused as refused:
            return _error(refused.status, refused.message, refused.code)
        late = fault_after(fault, error_body, request)
        return late if late is not None else json_response(200, decided)

    def _remediation(self, request: web.Request) -> dict[str, Any] | None:
        match = request.match_info
        if match["cluster_id"] not in self.clusters or match["instance_id"] == "-":
            return None
        return self.remediations.find(
            match["cluster_id"], match["instance_id"], match["remediation_id"]
        )

    @staticmethod
    def _remediation_not_found(request: web.Request) -> web.Response:
        remediation_id = request.match_info["remediation_id"]
        return _error(404, f"remediation {remediation_id} not found", "not_found")

    # -- handlers -------------------------------------------------------------------------
    async def _list(self, request: web.Request) -> web.StreamResponse:
        await self.record("list", request)
        refused = await self._refuse("list", request)
        if refused is not None:
            return refused
        project = request.query.get("projectId")
        clusters = [
            self.view(cluster_id)
            for cluster_id, cluster in self.clusters.items()
            if project is None or cluster.get("project_id") == project
        ]
        return json_response(200, {"clusters": clusters})

    async def _get(self, request: web.Request) -> web.StreamResponse:
        await self.record("get", request)
        refused = await self._refuse("get", request)
        if refused is not None:
            return refused
        cluster_id = request.match_info["cluster_id"]
        if cluster_id not in self.clusters:
            return self._not_found(cluster_id)
        return json_response(200, self.view(cluster_id))

    async def _update(self, request: web.Request) -> web.StreamResponse:
        body = await self.record("update", request)
        if not self._authorized(request):
            return self._unauthorized()
        fault = self.faults.take("update")
        early = await fault_before(fault, error_body)
        if early is not None:
            return early
        cluster_id = request.match_info["cluster_id"]
        if cluster_id not in self.clusters:
            return self._not_found(cluster_id)
        self.view(cluster_id)  # bring the status up to date before changing it
        try:
            changes = validate_update(self.clusters[cluster_id], body, datetime.now(UTC))
        except UpdateRejected as rejected:
            return _error(400, rejected.message, rejected.code)
        added = self._apply(cluster_id, changes)
        if fault is not None and fault.kind in EFFECTS:
            self._effects[cluster_id] = _Effect(fault.kind, fault.seconds, added)
        late = fault_after(fault, error_body, request)
        if late is not None:
            return late
        return json_response(200, self.view(cluster_id))

    async def _refuse(self, route: str, request: web.Request) -> web.StreamResponse | None:
        if not self._authorized(request):
            return self._unauthorized()
        fault = self.faults.take(route)
        early = await fault_before(fault, error_body)
        # A read has nothing to apply: "apply then fail" is its failure alone.
        return early if early is not None else fault_after(fault, error_body, request)

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.api_key}"

    @staticmethod
    def _unauthorized() -> web.Response:
        return _error(401, "Invalid API key provided", "invalid_api_key")

    @staticmethod
    def _not_found(cluster_id: str) -> web.Response:
        return _error(404, f"cluster {cluster_id} not found", "cluster_not_found")

    # -- state ----------------------------------------------------------------------------
    def view(self, cluster_id: str) -> dict[str, Any]:
        """The cluster as a read sees it now (advancing any transition in progress)."""
        self._advance(cluster_id)
        return copy.deepcopy(self.clusters[cluster_id])

    def _apply(self, cluster_id: str, changes: dict[str, Any]) -> list[str]:
        """Apply a validated update; the node ids it added."""
        cluster = self.clusters[cluster_id]
        before = _shape(cluster)
        had = {n["node_id"] for n in cluster.get("gpu_worker_nodes", [])}
        if "num_preemptible_gpus" in changes:
            changes["desired_preemptible_gpus"] = changes.pop("num_preemptible_gpus")
        cluster.update(changes)
        if "num_gpus" in changes:
            self._resize_nodes(cluster, changes["num_gpus"])
        if _shape(cluster) != before:  # a new decommission time alone needs no provisioning
            self._transitions[cluster_id] = _Transition(time.monotonic(), datetime.now(UTC))
        return [
            n["node_id"] for n in cluster.get("gpu_worker_nodes", []) if n["node_id"] not in had
        ]

    def _resize_nodes(self, cluster: dict[str, Any], num_gpus: int) -> None:
        nodes: list[dict[str, Any]] = cluster["gpu_worker_nodes"]
        wanted = math.ceil(num_gpus / GPUS_PER_NODE)
        now = datetime.now(UTC)
        events: list[dict[str, Any]] = cluster.setdefault("node_lifecycle_events", [])
        while len(nodes) > wanted:
            node = nodes.pop()
            node.update(deleted_at=_ts(now), marked_for_deletion=True, status="Deleted")
            cluster.setdefault("deleted_gpu_worker_nodes", []).append(node)
            events.append(
                self._event(node, "TogetherScaledDown", "node removed by scale-down", now)
            )
        used = {n["node_id"] for n in nodes} | {
            n["node_id"] for n in cluster.get("deleted_gpu_worker_nodes", [])
        }
        index = 0
        while len(nodes) < wanted:
            node = _worker_node(
                cluster["cluster_id"], index, cluster["gpu_type"], now, running=False
            )
            index += 1
            if node["node_id"] in used:
                continue
            nodes.append(node)
            events.append(self._event(node, "TogetherScaledUp", "node added by scale-up", now))

    @staticmethod
    def _event(node: dict[str, Any], reason: str, message: str, now: datetime) -> dict[str, Any]:
        return {
            "message": message,
            "node_id": node["node_id"],
            "reason": reason,
            "timestamp": _ts(now),
        }

    def _advance(self, cluster_id: str) -> None:
        transition = self._transitions.get(cluster_id)
        if transition is None:
            self._act(cluster_id)
            return
        cluster = self.clusters[cluster_id]
        step = self.transition_seconds / (len(_PROGRESS) - 1)
        elapsed = time.monotonic() - transition.started
        index = len(_PROGRESS) - 1 if step <= 0 else min(int(elapsed / step), len(_PROGRESS) - 1)
        if self.stepwise:
            index = min(index, transition.reached + 1)
        for reached in range(transition.reached + 1, index + 1):
            status, phase = _PROGRESS[reached]
            at = transition.started_at + timedelta(seconds=step * reached)
            cluster["status"] = status
            cluster.setdefault("phase_transitions", []).append(
                {"phase": phase, "transition_time": _ts(at)}
            )
        transition.reached = max(transition.reached, index)
        if index == len(_PROGRESS) - 1:
            self._settle(cluster)
            del self._transitions[cluster_id]
            self._act(cluster_id)

    def _act(self, cluster_id: str) -> None:
        """A settled change's fault (SPEC §14): its new nodes made unhealthy at once, or a
        remediation proposed on one of them ``seconds`` after the cluster settled."""
        effect = self._effects.get(cluster_id)
        if effect is None:
            return
        cluster = self.clusters[cluster_id]
        nodes = cluster.get("gpu_worker_nodes", [])
        if effect.kind is FaultKind.NEW_NODES_UNHEALTHY:
            for node in nodes:
                if node["node_id"] in effect.nodes:
                    node["status"] = "NotReady"
            del self._effects[cluster_id]
            return
        if effect.settled is None:
            effect.settled = time.monotonic()
        if time.monotonic() - effect.settled < effect.seconds:
            return
        del self._effects[cluster_id]
        ids = [n["node_id"] for n in nodes]
        index = next((ids.index(i) for i in effect.nodes if i in ids), 0)
        self.remediations.create(copy.deepcopy(cluster), NewRemediation(node=index))

    @staticmethod
    def _settle(cluster: dict[str, Any]) -> None:
        cluster["allocated_preemptible_gpus"] = cluster.get("desired_preemptible_gpus", 0)
        now = _ts(datetime.now(UTC))
        for node in cluster.get("gpu_worker_nodes", []):
            if node.get("status") != "Ready":
                node["status"] = "Ready"
                node["phase_transitions"].append(
                    {"phase": "NODE_PHASE_RUNNING", "transition_time": now}
                )


async def _json_or_empty(request: web.Request) -> Any:
    return await request.json() if request.can_read_body else {}
