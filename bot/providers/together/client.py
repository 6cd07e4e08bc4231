"""Together AI Instant Clusters: the HTTP client (list, get, update) and its error mapping."""

from __future__ import annotations

import asyncio
import http
import json
import math
from typing import TypeVar, Unpack
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from bot.metrics import PROVIDER_ERRORS
from bot.providers.errors import (
    ProviderError,
    ProviderMalformedReply,
    ProviderRequestError,
    error_for_status,
)
from bot.providers.http import (
    ClientSettings,
    Operation,
    ProviderTransport,
    RetryMode,
    Sent,
    parse_retry_after,
)
from bot.providers.together.models import PROVIDER, ClusterList, ClusterUpdate, TogetherCluster

_MESSAGE_LIMIT = 500
_M = TypeVar("_M", bound=BaseModel)
# A cluster list longer than this (bytes; about 200 clusters with their nodes) is validated
# a few clusters at a time, yielding to the event loop in between: parsed in one pass, 5,000
# clusters (27 MB) held the loop for over 2 s, and /healthz with it.
LARGE_LIST_BYTES = 1_000_000
CLUSTERS_PER_TURN = 25


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
    text: object = None
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


def error_field(response: httpx.Response) -> str | None:
    """The request field Together's error names (``error.param`` of its ``ErrorData``)."""
    try:
        body = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    param = error.get("param") if isinstance(error, dict) else None
    return param.strip() if isinstance(param, str) and param.strip() else None


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


LIST, GET, CHANGE = Operation.LIST_CLUSTERS, Operation.GET_CLUSTER, Operation.CHANGE_CLUSTER


class TogetherCalls:
    """One call to Together's API over a ProviderTransport: its failures typed and counted."""

    def __init__(self, transport: ProviderTransport) -> None:
        self.transport = transport

    async def _reply(
        self,
        method: str,
        path: str,
        operation: Operation,
        mode: RetryMode,
        **sent: Unpack[Sent],
    ) -> httpx.Response:
        """The answer to one call, a success (anything else raised as its error)."""
        try:
            response = await self.transport.request(
                method, path, operation=operation, mode=mode, **sent
            )
        except ProviderError as exc:
            raise self._count(operation, exc) from None
        if not response.is_success:
            write = mode is not RetryMode.READ
            raise self._count(operation, self._status_error(response, may_have_applied=write))
        return response

    async def _call(
        self,
        method: str,
        path: str,
        operation: Operation,
        mode: RetryMode,
        **sent: Unpack[Sent],
    ) -> object:
        """The JSON body of a successful answer."""
        response = await self._reply(method, path, operation, mode, **sent)
        try:
            return response.json()
        except ValueError:
            raise self._not_json(response, operation, mode) from None

    def _parsed(
        self, response: httpx.Response, model: type[_M], operation: Operation, mode: RetryMode
    ) -> _M:
        """A successful answer's body as ``model``, parsed and validated in one pass (no
        Python objects in between: a cluster object with its nodes in half the time)."""
        try:
            return model.model_validate_json(response.content)
        except ValidationError as exc:
            if exc.errors()[0]["type"] == "json_invalid":
                raise self._not_json(response, operation, mode) from None
            raise self._malformed(
                operation,
                exc,
                what="a cluster object",
                may_have_applied=mode is not RetryMode.READ,
            ) from None

    def _not_json(
        self, response: httpx.Response, operation: Operation, mode: RetryMode
    ) -> ProviderError:
        return self._count(
            operation,
            ProviderMalformedReply(
                "the reply was not JSON",
                provider=PROVIDER,
                status=response.status_code,
                may_have_applied=mode is not RetryMode.READ,
            ),
        )

    def _status_error(self, response: httpx.Response, *, may_have_applied: bool) -> ProviderError:
        retry_after = parse_retry_after(response.headers.get("Retry-After"), math.inf)
        return error_for_status(
            PROVIDER,
            response.status_code,
            error_message(response),
            retry_after=retry_after,
            may_have_applied=may_have_applied,
            field=error_field(response),
        )

    def _malformed(
        self, operation: Operation, exc: ValidationError, *, what: str, may_have_applied: bool
    ) -> ProviderError:
        first = exc.errors()[0] if exc.errors() else None
        where = ".".join(str(p) for p in first["loc"]) if first else "?"
        detail = f"{where}: {first['msg']}" if first else "unexpected shape"
        return self._count(
            operation,
            ProviderMalformedReply(
                f"the reply is not {what} ({exc.error_count()} problems, first {detail})",
                provider=PROVIDER,
                status=200,
                may_have_applied=may_have_applied,
            ),
        )

    @staticmethod
    def _count(operation: Operation, error: ProviderError) -> ProviderError:
        PROVIDER_ERRORS.labels(PROVIDER, operation, error.kind).inc()
        return error


class TogetherClient(TogetherCalls):
    """Typed calls to Together's cluster endpoints over a ProviderTransport."""

    def __init__(self, transport: ProviderTransport, project_id: str | None = None) -> None:
        super().__init__(transport)
        self.project_id = project_id

    async def list_clusters(self) -> list[TogetherCluster]:
        params = {"projectId": self.project_id} if self.project_id else None
        response = await self._reply("GET", "compute/clusters", LIST, RetryMode.READ, params=params)
        if len(response.content) > LARGE_LIST_BYTES:
            return await self._clusters_in_turns(response)
        return self._parsed(response, ClusterList, LIST, RetryMode.READ).clusters

    async def _clusters_in_turns(self, response: httpx.Response) -> list[TogetherCluster]:
        """A long list validated one cluster at a time (each as JSON, as ``_parsed`` does),
        the loop free every ``CLUSTERS_PER_TURN``. Anything but a list of objects is left
        to ``_parsed``, whose error names it."""
        try:
            body = json.loads(response.content)
        except ValueError:
            raise self._not_json(response, LIST, RetryMode.READ) from None
        items = body.get("clusters") if isinstance(body, dict) else None
        if not isinstance(items, list):
            return self._parsed(response, ClusterList, LIST, RetryMode.READ).clusters
        clusters: list[TogetherCluster] = []
        for start in range(0, len(items), CLUSTERS_PER_TURN):
            for item in items[start : start + CLUSTERS_PER_TURN]:
                try:
                    clusters.append(TogetherCluster.model_validate_json(json.dumps(item)))
                except ValidationError as exc:
                    raise self._malformed(
                        LIST, exc, what="a cluster object", may_have_applied=False
                    ) from None
            await asyncio.sleep(0)
        return clusters

    async def get_cluster(self, cluster_id: str) -> TogetherCluster:
        response = await self._reply("GET", self._path(cluster_id, GET), GET, RetryMode.READ)
        return self._parsed(response, TogetherCluster, GET, RetryMode.READ)

    async def update_cluster(self, cluster_id: str, update: ClusterUpdate) -> TogetherCluster:
        mode = RetryMode.IDEMPOTENT_WRITE
        response = await self._reply(
            "PUT", self._path(cluster_id, CHANGE), CHANGE, mode, json=update.to_body()
        )
        return self._parsed(response, TogetherCluster, CHANGE, mode)

    async def aclose(self) -> None:
        await self.transport.aclose()

    # -- internals ----------------------------------------------------------------------
    def _path(self, cluster_id: str, operation: Operation) -> str:
        if not cluster_id:
            raise self._count(
                operation, ProviderRequestError("no cluster id given", provider=PROVIDER)
            )
        return cluster_path(cluster_id)
