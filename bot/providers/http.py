"""The transport both provider clients share: one connection pool per credential (an
aiohttp session behind httpx's transport interface, bot.providers.wire), timeouts, retries
by what is safe to repeat, and exception texts without secrets.

Retry rules (SPEC §1.3):
- ``READ`` (GET): connect errors, timeouts, dropped connections, 429 and 5xx.
- ``IDEMPOTENT_WRITE`` (Together PUT, an absolute target): connect errors, 429, 502/503/504.
- ``UNSAFE_WRITE`` (E2E actions): only what provably did not reach the server
  (connect errors) and 429. Never after a read timeout or a 5xx: ``scale_cluster`` twice
  adds twice as many nodes.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias, TypedDict, Unpack

import httpx
import stamina

from bot.errors import GpuopsError
from bot.metrics import PROVIDER_LATENCY, PROVIDER_RETRIES
from bot.pacing import waiting_elsewhere
from bot.providers.errors import (
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
)
from bot.providers.wire import AiohttpTransport
from bot.redact import register_secret

log = logging.getLogger(__name__)

# A query parameter's value, as httpx takes it.
QueryValue: TypeAlias = str | int | float | bool | None


class Sent(TypedDict, total=False):
    """What a call sends past its method and path: query parameters, a JSON body."""

    params: Mapping[str, QueryValue] | None
    json: object


USER_AGENT = f"python-httpx/{httpx.__version__}"  # as AsyncClient sent it


class Operation(enum.StrEnum):
    """The ``operation`` label of the provider metrics: the same names for every provider, so
    one dashboard lines them up (a Together PUT and an E2E action are both a change)."""

    LIST_CLUSTERS = "list_clusters"
    GET_CLUSTER = "get_cluster"
    CHANGE_CLUSTER = "change_cluster"
    LIST_REMEDIATIONS = "list_remediations"  # Together's node remediations (SPEC §7.1)
    GET_REMEDIATION = "get_remediation"
    DECIDE_REMEDIATION = "decide_remediation"  # approve, reject or cancel


class RetryMode(enum.Enum):
    READ = "read"
    IDEMPOTENT_WRITE = "idempotent_write"
    UNSAFE_WRITE = "unsafe_write"


_RETRYABLE_STATUS: dict[RetryMode, frozenset[int]] = {
    RetryMode.READ: frozenset({429, 500, 502, 503, 504}),
    RetryMode.IDEMPOTENT_WRITE: frozenset({429, 502, 503, 504}),
    RetryMode.UNSAFE_WRITE: frozenset({429}),
}


@dataclass(frozen=True)
class ClientSettings:
    """Timeouts and retry budget for provider calls (from bot.config.Settings)."""

    connect_timeout: float = 5.0
    total_timeout: float = 30.0
    attempts: int = 4
    wait_initial: float = 0.2
    wait_max: float = 5.0
    retry_after_cap: float = 10.0
    retry_budget: float = 60.0

    @property
    def max_call_seconds(self) -> float:
        """How long after it starts a call (with its retries) may still reach the provider."""
        waits = (self.attempts - 1) * max(self.wait_max, self.retry_after_cap)
        by_attempts = self.attempts * self.total_timeout + waits
        return min(by_attempts, self.retry_budget + self.total_timeout)


class _Retry(GpuopsError):
    """Raised inside the retry loop for an outcome that may be repeated."""

    def __init__(
        self,
        *,
        response: httpx.Response | None = None,
        error: ProviderError | None = None,
        wait: float | None = None,
    ) -> None:
        self.response = response
        self.error = error
        self.wait = wait
        self.where = ""  # "together GET /clusters", set by the loop that retries it
        super().__init__("retry")

    def cause(self) -> str:
        if self.error is not None:
            return self.error.provider_message
        return f"HTTP {self.response.status_code}" if self.response is not None else "retry"


def _log_retry(details: stamina.instrumentation.RetryDetails) -> None:
    """One line per scheduled retry, saying what is retried and why (stamina's own hook
    logs a bare ``stamina.retry_scheduled`` whose context is only in the record's extras)."""
    cause = details.caused_by
    what = cause.where if isinstance(cause, _Retry) and cause.where else details.name
    why = cause.cause() if isinstance(cause, _Retry) else type(cause).__name__
    log.warning("%s: %s; retry %d in %.1f s", what, why, details.retry_num, details.wait_for)


stamina.instrumentation.set_on_retry_hooks([_log_retry])


def parse_retry_after(value: str | None, cap: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds form), capped."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return max(0.0, min(seconds, cap))


@dataclass
class ProviderTransport:
    """HTTP for one provider credential. ``request`` returns the final HTTP response
    (whatever its status) or raises a ProviderError for a transport failure."""

    provider: str
    base_url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    auth_params: Mapping[str, str] = field(default_factory=dict)
    settings: ClientSettings = field(default_factory=ClientSettings)
    secrets: tuple[str, ...] = ()
    # Another httpx transport (a test's recorder or fault); None: bot.providers.wire's.
    transport: httpx.AsyncBaseTransport | None = None
    _own: AiohttpTransport | None = field(default=None, init=False, repr=False)
    _prefix: str = field(init=False, repr=False)
    _headers: httpx.Headers = field(init=False, repr=False)
    _timeouts: dict[str, float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for secret in self.secrets:
            register_secret(secret)
        s = self.settings
        self._prefix = self.base_url.rstrip("/") + "/"
        self._headers = httpx.Headers({"User-Agent": USER_AGENT, **self.headers})
        # What httpx.AsyncClient(timeout=Timeout(total, connect=...)) put on each request.
        self._timeouts = {
            "connect": s.connect_timeout,
            "read": s.total_timeout,
            "write": s.total_timeout,
            "pool": s.total_timeout,
        }

    @property
    def _wire(self) -> httpx.AsyncBaseTransport:
        """The transport of the next request (tests swap ``transport`` between calls)."""
        if self.transport is not None:
            return self.transport
        if self._own is None:
            s = self.settings
            self._own = AiohttpTransport(
                connect_timeout=s.connect_timeout, read_timeout=s.total_timeout
            )
        return self._own

    async def aclose(self) -> None:
        for wire in (self.transport, self._own):
            if wire is not None:
                await wire.aclose()

    async def _send(
        self, method: str, path: str, query: Mapping[str, QueryValue], body: object
    ) -> httpx.Response:
        """One HTTP exchange, read whole. No client between us and the transport: redirects
        are not followed, no cookies kept, and this costs half of AsyncClient.request."""
        request = httpx.Request(
            method,
            self._prefix + path.lstrip("/"),
            params=query or None,
            json=body,
            headers=self._headers,
            extensions={"timeout": self._timeouts},
        )
        response = await self._wire.handle_async_request(request)
        try:
            await response.aread()
        finally:
            await response.aclose()
        return response

    async def request(
        self, method: str, path: str, *, operation: Operation, mode: RetryMode, **sent: Unpack[Sent]
    ) -> httpx.Response:
        async with waiting_elsewhere():  # a paced command's slot is free meanwhile
            return await self._request(method, path, operation, mode, sent)

    async def _request(
        self, method: str, path: str, operation: Operation, mode: RetryMode, sent: Sent
    ) -> httpx.Response:
        query = {**self.auth_params, **(sent.get("params") or {})}
        json = sent.get("json")
        s = self.settings
        attempt_no = 0
        try:
            async for attempt in stamina.retry_context(
                on=self._backoff_hook,
                attempts=max(1, s.attempts),
                timeout=s.retry_budget,
                wait_initial=s.wait_initial,
                wait_max=s.wait_max,
                wait_jitter=min(s.wait_initial, 1.0),
            ):
                with attempt:
                    attempt_no += 1
                    if attempt_no > 1:
                        PROVIDER_RETRIES.labels(self.provider, operation).inc()
                    try:
                        return await self._attempt(method, path, operation, mode, query, json)
                    except _Retry as retry:
                        retry.where = f"{self.provider} {method} /{path.lstrip('/')}"
                        raise
        except _Retry as exhausted:
            if exhausted.response is not None:
                return exhausted.response
            assert exhausted.error is not None
            raise exhausted.error from None
        raise AssertionError("unreachable: retry loop ended without an outcome")

    @staticmethod
    def _backoff_hook(exc: Exception) -> bool | float:
        if not isinstance(exc, _Retry):
            return False
        return exc.wait if exc.wait is not None else True

    async def _attempt(
        self,
        method: str,
        path: str,
        operation: Operation,
        mode: RetryMode,
        query: Mapping[str, QueryValue],
        body: object,
    ) -> httpx.Response:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.settings.total_timeout):
                response = await self._send(method, path, query, body)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # The request never reached the server: always safe to try again.
            raise _Retry(error=self._connection_error(exc)) from None
        except (httpx.TimeoutException, TimeoutError):
            text = f"no answer within {self.settings.total_timeout:g} s"
            raise self._maybe_sent(ProviderTimeout, text, mode) from None
        except httpx.TransportError as exc:
            # The connection broke after the request may have been sent.
            text = f"connection failed during the request ({type(exc).__name__})"
            raise self._maybe_sent(ProviderConnectionError, text, mode) from None
        finally:
            PROVIDER_LATENCY.labels(self.provider, operation).observe(time.perf_counter() - started)
        if response.status_code in _RETRYABLE_STATUS[mode]:
            wait = None
            if response.status_code == 429:
                wait = parse_retry_after(
                    response.headers.get("Retry-After"), self.settings.retry_after_cap
                )
            raise _Retry(response=response, wait=wait)
        return response

    def _maybe_sent(self, kind: type[ProviderError], text: str, mode: RetryMode) -> GpuopsError:
        """A failure after the request may have reached the server: tried again for a read,
        else raised as it is (a write may have been applied)."""
        error = kind(text, provider=self.provider, may_have_applied=mode is not RetryMode.READ)
        return _Retry(error=error) if mode is RetryMode.READ else error

    def _connection_error(self, exc: Exception) -> ProviderConnectionError:
        return ProviderConnectionError(
            f"could not connect ({type(exc).__name__})", provider=self.provider
        )
