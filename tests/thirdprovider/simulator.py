"""A small Lumen API on 127.0.0.1 (aiohttp): two clusters, Bearer auth, a resize that
takes effect at once; every request is recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.thirdprovider.client import LumenCluster

LUMEN_TOKEN = "lumen-test-token-41c9"


@dataclass
class Recorded:
    method: str
    path: str
    region: str | None
    body: Any


def seed_clusters() -> dict[str, LumenCluster]:
    """Lumen's two clusters, by id (the simulator's and the core harness's fleet's)."""
    return {
        "lc-1": LumenCluster(id="lc-1", name="vision-train", status="active", gpus=8),
        "lc-2": LumenCluster(id="lc-2", name="asr-batch", status="active", gpus=4),
    }


@dataclass
class LumenSimulator:
    token: str = LUMEN_TOKEN
    clusters: dict[str, LumenCluster] = field(default_factory=seed_clusters)
    requests: list[Recorded] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v2"

    async def start(self) -> str:
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/v2/clusters", self._list)
        app.router.add_get("/v2/clusters/{id}", self._get)
        app.router.add_post("/v2/clusters/{id}/resize", self._resize)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def calls(self, method: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method]

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        self.requests.append(
            Recorded(request.method, request.path, request.query.get("region"), body)
        )
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response({"error": "bad token"}, status=401)
        response: web.StreamResponse = await handler(request)
        return response

    async def _list(self, request: web.Request) -> web.Response:
        return web.json_response({"clusters": [c.model_dump() for c in self.clusters.values()]})

    async def _get(self, request: web.Request) -> web.Response:
        cluster = self.clusters.get(request.match_info["id"])
        if cluster is None:
            return web.json_response({"error": "no such cluster"}, status=404)
        return web.json_response(cluster.model_dump())

    async def _resize(self, request: web.Request) -> web.Response:
        cluster = self.clusters.get(request.match_info["id"])
        body = self.requests[-1].body
        if cluster is None:
            return web.json_response({"error": "no such cluster"}, status=404)
        if not isinstance(body, dict) or not isinstance(body.get("gpus"), int):
            return web.json_response({"error": "gpus: a whole number"}, status=400)
        resized = cluster.model_copy(update={"gpus": body["gpus"]})
        self.clusters[cluster.id] = resized
        return web.json_response(resized.model_dump())
