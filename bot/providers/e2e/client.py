"""E2E Networks TIR training clusters: the HTTP client and its reply rules.

The API (SPEC §1.2) answers with an envelope ``{code, data, errors, message}`` whose failure
shapes are heterogeneous (DRF ``{"detail"}``, ``{"status_code", "message"}``, ``errors: true``
on HTTP 200 …); every reply goes through ``_failure_of`` before its data is trusted.
Cluster changes are actions (``PUT …/cluster/{id}/`` with ``{"action": name, …}``) that are
never repeated once they may have reached the server.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Unpack

import httpx
from pydantic import (
    ValidationError,
)

from bot.metrics import PROVIDER_ERRORS
from bot.providers.e2e.models import (
    PROVIDER,
    REPLY_KINDS,
    ActionReply,
    E2EActionRequest,
    E2EClusterDetail,
    E2EClusterListItem,
    E2EReservedIp,
    lenient_int,
)
from bot.providers.errors import (
    ProviderError,
    ProviderMalformedReply,
    error_for_status,
)
from bot.providers.http import (
    ClientSettings,
    Operation,
    ProviderTransport,
    QueryValue,
    RetryMode,
    Sent,
    parse_retry_after,
)

log = logging.getLogger(__name__)

E2E_DEFAULT_BASE_URL = "https://api.e2enetworks.com/myaccount/api/v1/gpu"
CLUSTERS_PATH = "distributed_jobs_v2/cluster/"

# A server that keeps announcing more pages is not followed past this many.
MAX_PAGES = 200

# -- reply rules ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Failure:
    status: int | None
    message: str
    field: str | None = None


def _errors_say_failure(errors: object) -> bool:
    if errors is True:
        return True
    if isinstance(errors, dict | list | str):
        return len(errors) > 0
    return False


def _error_texts(errors: object) -> list[str]:
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


_NOT_FIELDS = frozenset({"detail", "non_field_errors", "auth"})


def _error_field(body: Mapping[str, object]) -> str | None:
    """The first request field a DRF-style ``errors`` object names (``{"page_no": […]}``);
    its ``detail``, ``non_field_errors`` and ``auth`` are not fields."""
    errors = body.get("errors")
    if not isinstance(errors, dict):
        return None
    return next((str(k) for k, v in errors.items() if k not in _NOT_FIELDS and v), None)


def _provider_message(body: Mapping[str, object], fallback: str) -> str:
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


def _failure_of(response: httpx.Response, body: object) -> _Failure | None:
    http_status = response.status_code
    fallback = response.reason_phrase or "no message"  # the error text adds the status
    if not 200 <= http_status < 300:
        if not isinstance(body, dict):
            return _Failure(http_status, fallback)
        return _Failure(http_status, _provider_message(body, fallback), _error_field(body))
    if not isinstance(body, dict):
        return None
    codes = [lenient_int(body.get(key)) for key in ("code", "status_code")]
    status = next((code for code in codes if code is not None and code >= 400), None)
    failed = status is not None or "detail" in body or _errors_say_failure(body.get("errors"))
    if not failed:
        return None
    message = _provider_message(body, "the provider reported a failure")
    return _Failure(status, message, _error_field(body))


def _error_from(failure: _Failure, response: httpx.Response, *, is_action: bool) -> ProviderError:
    # Retry-After is reported to the caller as a hint; the transport applies its own cap.
    return error_for_status(
        PROVIDER,
        failure.status,
        failure.message,
        retry_after=parse_retry_after(response.headers.get("Retry-After"), 3600.0),
        may_have_applied=is_action,
        field=failure.field,
    )


def _malformed(what: str, *, is_action: bool) -> ProviderMalformedReply:
    return ProviderMalformedReply(
        f"unexpected reply: {what}", provider=PROVIDER, may_have_applied=is_action
    )


def check_reply(response: httpx.Response, *, is_action: bool) -> dict[str, object]:
    """The reply's envelope when it is a success; otherwise the typed error (SPEC §1.2)."""
    try:
        body: object = response.json()
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

    def _scope(self) -> dict[str, QueryValue]:
        scope: dict[str, QueryValue] = {"project_id": self.project_id, "location": self.location}
        if self.active_iam is not None:
            scope["active_iam"] = self.active_iam
        return scope

    async def _call(
        self,
        method: str,
        path: str,
        *,
        operation: Operation,
        mode: RetryMode,
        **sent: Unpack[Sent],
    ) -> dict[str, object]:
        is_action = mode is RetryMode.UNSAFE_WRITE
        try:
            response = await self.transport.request(
                method,
                path,
                operation=operation,
                mode=mode,
                params={**self._scope(), **(sent.get("params") or {})},
                json=sent.get("json"),
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
                operation=Operation.LIST_CLUSTERS,
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
            "GET",
            f"{CLUSTERS_PATH}{cluster_id}/",
            operation=Operation.GET_CLUSTER,
            mode=RetryMode.READ,
        )
        return _parse_detail(body.get("data"), is_action=False)

    async def run_action(self, cluster_id: int, action: E2EActionRequest) -> ActionReply:
        """Send one action. Never repeated once it may have reached the server."""
        body = await self._call(
            "PUT",
            f"{CLUSTERS_PATH}{cluster_id}/",
            operation=Operation.CHANGE_CLUSTER,
            mode=RetryMode.UNSAFE_WRITE,
            json=action.model_dump(mode="json"),
        )
        return _parse_action_reply(action.action, body)

    async def aclose(self) -> None:
        await self.transport.aclose()


def _parse_list_page(body: Mapping[str, object]) -> list[E2EClusterListItem]:
    data = body.get("data")
    if not isinstance(data, list):
        raise _malformed("the cluster list is not an array", is_action=False)
    try:
        return [E2EClusterListItem.model_validate(item) for item in data]
    except ValidationError:
        raise _malformed("a cluster in the list has no usable id", is_action=False) from None


def _more_pages(body: Mapping[str, object], page: int, got: int, new: int, per_page: int) -> bool:
    if got == 0 or new == 0:  # an empty page, or a server repeating itself
        return False
    total_pages = lenient_int(body.get("total_page_number"))
    if total_pages is not None:
        return page < total_pages
    total_count = lenient_int(body.get("total_count"))
    if total_count is not None:
        return page < math.ceil(total_count / per_page)
    return got >= per_page


def _parse_detail(data: object, *, is_action: bool) -> E2EClusterDetail:
    if not isinstance(data, dict):
        raise _malformed("the cluster is not an object", is_action=is_action)
    try:
        return E2EClusterDetail.model_validate(data)
    except ValidationError:
        raise _malformed("the cluster has no usable id", is_action=is_action) from None


def _parse_action_reply(action: str, body: Mapping[str, object]) -> ActionReply:
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
