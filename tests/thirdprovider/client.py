"""Lumen's HTTP API: ``GET clusters``, ``GET clusters/{id}``, ``POST clusters/{id}/resize``
with ``{"gpus": N}``; Bearer auth. The wire model is the cluster object."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from bot.providers.errors import ProviderMalformedReply, error_for_status
from bot.providers.http import ClientSettings, Operation, ProviderTransport, RetryMode

PROVIDER = "lumen"


class LumenCluster(BaseModel):
    id: str
    name: str
    status: str  # "active", "resizing", "degraded"
    gpus: int
    gpu_type: str = "L40S"


def build_lumen_transport(
    token: str,
    base_url: str,
    settings: ClientSettings,
    transport: httpx.AsyncBaseTransport | None = None,
) -> ProviderTransport:
    return ProviderTransport(
        provider=PROVIDER,
        base_url=base_url,
        headers={"Authorization": f"Bearer {token}"},
        settings=settings,
        secrets=(token,),
        transport=transport,
    )


class LumenClient:
    def __init__(self, transport: ProviderTransport, region: str) -> None:
        self.transport = transport
        self.region = region

    async def list_clusters(self) -> list[LumenCluster]:
        body = await self._call("GET", "clusters", Operation.LIST_CLUSTERS, RetryMode.READ)
        items = body.get("clusters") if isinstance(body, dict) else None
        return [self._cluster(item) for item in items or []]

    async def get_cluster(self, cluster_id: str) -> LumenCluster:
        path = f"clusters/{quote(cluster_id, safe='')}"
        return self._cluster(await self._call("GET", path, Operation.GET_CLUSTER, RetryMode.READ))

    async def resize(self, cluster_id: str, gpus: int) -> LumenCluster:
        path = f"clusters/{quote(cluster_id, safe='')}/resize"
        body = await self._call(
            "POST", path, Operation.CHANGE_CLUSTER, RetryMode.UNSAFE_WRITE, {"gpus": gpus}
        )
        return self._cluster(body)

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def _call(
        self, method: str, path: str, operation: Operation, mode: RetryMode, json: Any = None
    ) -> Any:
        response = await self.transport.request(
            method, path, operation=operation, mode=mode, params={"region": self.region}, json=json
        )
        if response.status_code >= 400:
            raise error_for_status(
                PROVIDER,
                response.status_code,
                response.text[:200],
                may_have_applied=mode is not RetryMode.READ,
            )
        try:
            return response.json()
        except ValueError:
            raise ProviderMalformedReply(
                "a reply that is not JSON", provider=PROVIDER, status=response.status_code
            ) from None

    @staticmethod
    def _cluster(body: Any) -> LumenCluster:
        try:
            return LumenCluster.model_validate(body)
        except ValidationError:
            raise ProviderMalformedReply(
                "a reply that is not a cluster", provider=PROVIDER, status=200
            ) from None
