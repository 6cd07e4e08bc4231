"""httpx's transport interface over one aiohttp session: the provider clients keep httpx's
requests, responses and exception types, and the wire costs a third of httpcore's CPU.

Each failure becomes the httpx exception that says whether the request may have reached
the server, which is what ProviderTransport's retry rules read:

- ``ConnectError`` / ``ConnectTimeout``: no connection, so nothing was sent;
- ``ReadTimeout``, ``ReadError``, ``RemoteProtocolError``: the request may have arrived.

aiohttp sends an idempotent method (GET, PUT, …) once more by itself when the connection
drops before the reply. An E2E action is a PUT that is not idempotent (``scale_cluster``
twice adds twice the nodes), so ``_never_resend`` turns that drop into an error of its own
before aiohttp's loop sees it: whether to try again is ProviderTransport's decision alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request

import aiohttp
import httpx
from yarl import URL

from bot.errors import GpuopsError

# httpx's defaults, as before: a connection idle this long is not reused.
KEEPALIVE_SECONDS = 5.0
MAX_CONNECTIONS = 100


class _Dropped(GpuopsError):
    """The connection failed after it was made: the request may have been sent. Not an
    aiohttp error, so aiohttp's loop lets it through rather than sending again."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(type(cause).__name__)
        self.cause = cause


async def _never_resend(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    try:
        return await handler(request)
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError):
        raise  # never connected: aiohttp does not resend these either
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        raise _Dropped(exc) from None


def _httpx_error(exc: BaseException, request: httpx.Request) -> httpx.TransportError | None:
    """The httpx exception for an aiohttp failure (None: not a transport failure). The text
    is the aiohttp type's name only: aiohttp's own carries the URL, and E2E's has the key."""
    name = type(exc.cause if isinstance(exc, _Dropped) else exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(name, request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(name, request=request)
    if isinstance(exc, aiohttp.ServerTimeoutError):  # the socket read timed out
        return httpx.ReadTimeout(name, request=request)
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientOSError | _Dropped):
        return httpx.ReadError(name, request=request)
    if isinstance(exc, aiohttp.ClientError):  # a malformed reply, say
        return httpx.RemoteProtocolError(name, request=request)
    return None


class EnvironmentProxies:
    """The proxy a URL goes through, from HTTP_PROXY / HTTPS_PROXY / ALL_PROXY and NO_PROXY
    as httpx honoured them (read when the transport is made; each host's answer kept)."""

    def __init__(self) -> None:
        self._by_scheme = {
            scheme: url
            for scheme, url in urllib.request.getproxies_environment().items()
            if scheme in ("http", "https", "all")
        }
        self._bypassed: dict[str, bool] = {}

    def proxy_for(self, scheme: str, host: str) -> str | None:
        proxy = self._by_scheme.get(scheme) or self._by_scheme.get("all")
        if proxy is None:
            return None
        bypassed = self._bypassed.get(host)
        if bypassed is None:
            bypassed = self._bypassed[host] = bool(urllib.request.proxy_bypass(host))
        return None if bypassed else proxy


class AiohttpTransport(httpx.AsyncBaseTransport):
    """One provider credential's connections (made in the loop of the first request).
    Closing waits for the calls in flight (a click's decision, say) to finish first, at
    most ``read_timeout``: closing the session would cut them off mid-request."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        read_timeout: float,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        # ``connect`` bounds the wait for a free connection of the pool too: a request that
        # got none in time was never sent (ConnectTimeout), where the caller's overall
        # bound would have called it "no answer, may have applied".
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            connect=connect_timeout,
            sock_connect=connect_timeout,
            sock_read=read_timeout,
        )
        self._max_connections = max_connections
        self._proxies = EnvironmentProxies()
        self._close_within = read_timeout
        self._session: aiohttp.ClientSession | None = None
        self._in_flight = 0
        self._idle: asyncio.Event | None = None  # set while no call is in flight

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections,
                keepalive_timeout=KEEPALIVE_SECONDS,
                # As httpx verified: certifi's roots, or SSL_CERT_FILE / SSL_CERT_DIR.
                ssl=httpx.create_ssl_context(),
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                cookie_jar=aiohttp.DummyCookieJar(),  # the provider APIs set none to keep
                auto_decompress=False,  # httpx decodes what its Accept-Encoding asked for
                # httpx's are sent; no body is never "application/octet-stream"
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
                middlewares=(_never_resend,),
                trust_env=False,  # read once, by EnvironmentProxies: per call it cost 400 µs
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._open()
        self._in_flight += 1
        if self._idle is not None:
            self._idle.clear()
        try:
            return await self._exchange(session, request)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0 and self._idle is not None:
                self._idle.set()

    async def _exchange(
        self, session: aiohttp.ClientSession, request: httpx.Request
    ) -> httpx.Response:
        try:
            async with session.request(
                request.method,
                URL(str(request.url), encoded=True),  # exactly as httpx quoted it
                headers=request.headers.multi_items(),
                data=request.content or None,
                allow_redirects=False,
                proxy=self._proxies.proxy_for(request.url.scheme, request.url.host),
            ) as reply:
                body = await reply.read()
        except Exception as exc:
            error = _httpx_error(exc, request)
            if error is None:
                raise
            raise error from None
        return httpx.Response(
            reply.status, headers=reply.raw_headers, content=body, request=request
        )

    async def aclose(self) -> None:
        if self._session is None:
            return
        if self._in_flight:
            self._idle = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._close_within):
                    await self._idle.wait()
        await self._session.close()
