"""What both provider simulators share: an aiohttp server on 127.0.0.1, a request log,
fault injection per route, and control endpoints under ``/_sim/`` for tests and the demo:
``POST /_sim/faults``, ``DELETE /_sim/faults``, ``GET /_sim/requests``, ``POST /_sim/reset``,
``POST /_sim/clusters/{id}/degrade`` (optional body ``{"status": …}``),
``POST /_sim/clusters/{id}/restore`` and ``DELETE /_sim/clusters/{id}``.

Faults are armed per route name (each simulator names its routes: e.g. ``list``, ``get``,
``update`` / ``action``; ``*`` matches every route) and consumed one use at a time.
"""

from __future__ import annotations

import abc
import asyncio
import enum
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web
from pydantic import BaseModel, ValidationError


class ErrorBody(Protocol):
    """A simulator's error shape for ``status`` and ``message``; with ``field``, the shape
    its provider uses for a validation error naming that request field."""

    def __call__(
        self, status: int, message: str, *, field: str | None = None
    ) -> dict[str, Any]: ...


class FaultKind(enum.StrEnum):
    LATENCY = "latency"  # sleep `seconds`, then answer normally
    RATE_LIMIT = "rate_limit"  # 429 with Retry-After: `retry_after`
    SERVER_ERROR = "server_error"  # `status` (500/502/503/504) without applying
    MALFORMED = "malformed"  # 200 with a body that is not JSON, without applying
    HANG = "hang"  # never answer (until `seconds`, default an hour)
    APPLY_THEN_FAIL = "apply_then_fail"  # apply the change, then answer `status`
    APPLY_THEN_DROP = "apply_then_drop"  # apply the change, then close without an answer
    ERRORS_TRUE = "errors_true"  # HTTP 200 with {"errors": true, ...} (E2E), not applied
    FIELD_ERROR = "field_error"  # `status` (400/422) naming request field `field`, not applied
    # Together updates, applied and answered as usual; what follows goes wrong (SPEC §14):
    NEW_NODES_UNHEALTHY = "new_nodes_unhealthy"  # the nodes it adds stay NotReady once Ready
    REMEDIATION_IN_SOAK = "remediation_in_soak"  # `seconds` after Ready, a remediation on one


FAULT_KINDS = tuple(kind.value for kind in FaultKind)
FAULT_USAGE = (
    'POST /_sim/faults {"kind": …, "route": "*", "status": 500, "seconds": 0, '
    '"retry_after": 1, "times": 1}; kinds: ' + ", ".join(FAULT_KINDS)
)


class Fault(BaseModel):
    route: str = "*"
    kind: FaultKind
    status: int = 500
    seconds: float = 0.0
    retry_after: int = 1
    times: int = 1  # how many requests it hits; -1 = every request until cleared
    message: str = "injected fault"
    field: str | None = None  # the request field a field_error names


@dataclass
class RecordedRequest:
    route: str
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class FaultInjector:
    faults: list[Fault] = field(default_factory=list)

    def add(self, fault: Fault) -> None:
        self.faults.append(fault)

    def clear(self) -> None:
        self.faults.clear()

    def take(self, route: str) -> Fault | None:
        for fault in self.faults:
            if fault.route in (route, "*"):
                if fault.times > 0:
                    fault.times -= 1
                    if fault.times == 0:
                        self.faults.remove(fault)
                return fault
        return None


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps(body),
        content_type="application/json",
        headers=headers,
    )


# Faults that leave the call alone and act on what the change does afterwards.
EFFECTS = frozenset({FaultKind.NEW_NODES_UNHEALTHY, FaultKind.REMEDIATION_IN_SOAK})


async def fault_before(fault: Fault | None, error_body: ErrorBody) -> web.StreamResponse | None:
    """Answer for a fault that strikes before the change is applied, or None to go on."""
    if fault is None or fault.kind in _AFTER or fault.kind in EFFECTS:
        return None
    if fault.kind is FaultKind.LATENCY:
        await asyncio.sleep(fault.seconds)
        return None
    if fault.kind is FaultKind.RATE_LIMIT:
        return json_response(
            429, error_body(429, fault.message), headers={"Retry-After": str(fault.retry_after)}
        )
    if fault.kind is FaultKind.SERVER_ERROR:
        return json_response(fault.status, error_body(fault.status, fault.message))
    if fault.kind is FaultKind.MALFORMED:
        return web.Response(status=200, text='{"truncated": ', content_type="application/json")
    if fault.kind is FaultKind.HANG:
        await asyncio.sleep(fault.seconds or 3600)
        return json_response(504, error_body(504, "hung"))
    if fault.kind is FaultKind.FIELD_ERROR:
        return json_response(
            fault.status, error_body(fault.status, fault.message, field=fault.field)
        )
    if fault.kind is FaultKind.ERRORS_TRUE:
        return json_response(200, {"errors": True, "message": fault.message})
    raise AssertionError(f"unhandled fault kind {fault.kind}")


_AFTER = frozenset({FaultKind.APPLY_THEN_FAIL, FaultKind.APPLY_THEN_DROP})


def fault_after(
    fault: Fault | None, error_body: ErrorBody, request: web.Request
) -> web.StreamResponse | None:
    """Answer for a fault that strikes after the change was applied, or None. For a drop
    the connection is closed first, so the client reads no answer at all."""
    if fault is None or fault.kind not in _AFTER:
        return None
    if fault.kind is FaultKind.APPLY_THEN_DROP and request.transport is not None:
        request.transport.close()
    return json_response(fault.status, error_body(fault.status, fault.message))


class SimulatorServer(abc.ABC):
    """Base class: subclasses add their routes in ``add_routes`` and call ``record``."""

    name = "simulator"

    def __init__(self) -> None:
        self.faults = FaultInjector()
        self.requests: list[RecordedRequest] = []
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.app = web.Application()
        self.app.router.add_post("/_sim/faults", self._post_fault)
        self.app.router.add_delete("/_sim/faults", self._clear_faults)
        self.app.router.add_get("/_sim/requests", self._get_requests)
        self.app.router.add_post("/_sim/reset", self._reset)
        self.app.router.add_post("/_sim/clusters/{cluster_id}/degrade", self._post_degrade)
        self.app.router.add_post("/_sim/clusters/{cluster_id}/restore", self._post_restore)
        self.app.router.add_delete("/_sim/clusters/{cluster_id}", self._delete_cluster)
        self.add_routes(self.app)

    # -- subclass hooks ---------------------------------------------------------------
    @abc.abstractmethod
    def add_routes(self, app: web.Application) -> None:
        """Add the provider API's routes."""

    @abc.abstractmethod
    def degrade(self, cluster_id: str, status: str | None) -> bool:
        """Put a cluster into an unhealthy status (the provider's usual one when None);
        False when there is no such cluster."""

    @abc.abstractmethod
    def restore(self, cluster_id: str) -> bool:
        """Return a degraded cluster to its healthy status; False when there is none."""

    @abc.abstractmethod
    def remove(self, cluster_id: str) -> bool:
        """Make a cluster disappear, as if deleted elsewhere; False when there is none."""

    def reset(self) -> None:
        """Reseed the data and forget requests and faults."""
        self.faults.clear()
        self.requests.clear()

    # -- helpers ----------------------------------------------------------------------
    async def record(self, route: str, request: web.Request) -> Any:
        raw = await request.read()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        self.requests.append(
            RecordedRequest(
                route=route,
                method=request.method,
                path=request.path,
                query=dict(request.query),
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body,
            )
        )
        return body

    def calls(self, route: str | None = None, method: str | None = None) -> list[RecordedRequest]:
        return [
            r
            for r in self.requests
            if (route is None or r.route == route) and (method is None or r.method == method)
        ]

    # -- lifecycle --------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1]
        return self.base_url

    @property
    @abc.abstractmethod
    def base_url(self) -> str:
        """The API base URL clients use (scheme, host, port and the provider's prefix)."""

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- control endpoints ------------------------------------------------------------
    async def _post_fault(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        if not isinstance(body, dict):
            return _bad_fault("the body must be a JSON object")
        try:
            fault = Fault.model_validate(body)
        except ValidationError as exc:
            return _bad_fault(
                "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
            )
        self.faults.add(fault)
        return json_response(200, {"ok": True})

    async def _clear_faults(self, request: web.Request) -> web.Response:
        self.faults.clear()
        return json_response(200, {"ok": True})

    async def _get_requests(self, request: web.Request) -> web.Response:
        return json_response(
            200,
            [
                {"route": r.route, "method": r.method, "path": r.path, "body": r.body}
                for r in self.requests
            ],
        )

    async def _post_degrade(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        status = body.get("status") if isinstance(body, dict) else None
        if status is not None and not isinstance(status, str):
            return json_response(400, {"ok": False, "error": "status must be a string"})
        found = self.degrade(request.match_info["cluster_id"], status)
        return json_response(200 if found else 404, {"ok": found})

    async def _post_restore(self, request: web.Request) -> web.Response:
        found = self.restore(request.match_info["cluster_id"])
        return json_response(200 if found else 404, {"ok": found})

    async def _delete_cluster(self, request: web.Request) -> web.Response:
        found = self.remove(request.match_info["cluster_id"])
        return json_response(200 if found else 404, {"ok": found})

    async def _reset(self, request: web.Request) -> web.Response:
        self.reset()
        return json_response(200, {"ok": True})


def _bad_fault(problem: str) -> web.Response:
    """400 for a fault that cannot be armed, naming the kinds that can."""
    body = {"ok": False, "error": problem, "kinds": list(FAULT_KINDS), "usage": FAULT_USAGE}
    return json_response(400, body)


async def _json_body(request: web.Request) -> Any:
    """A control request's JSON body; None when it is empty or not JSON."""
    raw = await request.read()
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
