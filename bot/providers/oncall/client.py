"""Clients of the two on-call APIs (SPEC §16): who is on call now on a schedule.

Each read has its own deadline, well inside the 3 s Slack gives a click: an on-call answer
decides whether a click is an approval, so a slow tool must not cost the click its answer.
Nothing is retried (the deadline has no room for it; the caller's cache and the rule's
fallback are the answer to a fault). Tokens are registered as secrets and never put in an
error text: httpx exception texts hold the URL, so only their class is kept.

- PagerDuty: ``GET {base}/oncalls?schedule_ids[]=…&earliest=true&include[]=users`` with
  ``Authorization: Token token=…`` and ``Accept: application/vnd.pagerduty+json;version=2``.
- Opsgenie: ``GET {base}/v2/schedules/{id}/on-calls?scheduleIdentifierType=id&flat=false``
  with ``Authorization: GenieKey …``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal, Protocol, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from bot.errors import GpuopsError
from bot.providers.oncall.models import (
    SOURCE_TITLES,
    OnCallPerson,
    OpsgenieOnCallResponse,
    PagerDutyOncalls,
    Source,
    lowest_levels,
    opsgenie_people,
    pagerduty_people,
)
from bot.redact import register_secret

PAGERDUTY_URL = "https://api.pagerduty.com"
OPSGENIE_URL = "https://api.opsgenie.com"
PAGERDUTY_ACCEPT = "application/vnd.pagerduty+json;version=2"
DEFAULT_DEADLINE = 1.5  # seconds for one schedule's answer, pages included
_PAGE = 100  # PagerDuty's largest page
_MAX_PAGES = 5

_M = TypeVar("_M", bound=BaseModel)

Fault = Literal["unreachable", "slow", "rate_limited", "refused", "malformed"]


class OnCallUnavailable(GpuopsError):
    """An on-call tool gave no usable answer for a schedule: ``fault`` says how (its
    connection failed, it was slower than the deadline, it answered 429, it refused the
    request, or its answer was not the documented shape)."""

    def __init__(self, source: Source, schedule_id: str, fault: Fault, detail: str) -> None:
        self.source = source
        self.schedule_id = schedule_id
        self.fault = fault
        self.detail = detail
        super().__init__(f"{SOURCE_TITLES[source]} schedule {schedule_id}: {detail}")


class OnCallClient(Protocol):
    """Who is on call now on one schedule of one on-call tool."""

    source: Source

    async def on_call(self, schedule_id: str) -> list[OnCallPerson]: ...

    async def aclose(self) -> None: ...


class _Client:
    source: Source

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        *,
        deadline: float,
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.deadline = deadline
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(deadline),
            transport=transport,
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    def _unavailable(self, schedule_id: str, fault: Fault, detail: str) -> OnCallUnavailable:
        return OnCallUnavailable(self.source, schedule_id, fault, detail)

    async def _get(
        self,
        schedule_id: str,
        path: str,
        params: list[tuple[str, str]],
        model: type[_M],
        *,
        until: float,
    ) -> _M:
        """One documented answer, by ``until`` (a monotonic time), or OnCallUnavailable."""
        title = SOURCE_TITLES[self.source]
        left = until - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            async with asyncio.timeout(left):
                response = await self._http.get(self.base_url + path, params=tuple(params))
        except (TimeoutError, httpx.TimeoutException):
            detail = f"{title} did not answer within {self.deadline:g} s"
            raise self._unavailable(schedule_id, "slow", detail) from None
        except httpx.HTTPError as exc:
            detail = f"{title} could not be reached ({type(exc).__name__})"
            raise self._unavailable(schedule_id, "unreachable", detail) from None
        if response.status_code == 429:
            wait = response.headers.get("Retry-After")
            detail = f"{title} is rate limiting gpuops (429" + (
                f", retry after {wait} s)" if wait else ")"
            )
            raise self._unavailable(schedule_id, "rate_limited", detail)
        if response.status_code != 200:
            detail = f"{title} answered {response.status_code}"
            raise self._unavailable(schedule_id, "refused", detail)
        try:
            return model.model_validate_json(response.content)
        except ValidationError:
            detail = f"{title} answered with something other than its documented on-calls"
            raise self._unavailable(schedule_id, "malformed", detail) from None


class PagerDutyClient(_Client):
    """PagerDuty REST API v2 ``GET /oncalls`` for one schedule, the earliest on-call of
    each (escalation policy, level, user), users included (for their e-mail addresses)."""

    source: Source = "pagerduty"

    def __init__(
        self,
        token: str,
        base_url: str = PAGERDUTY_URL,
        *,
        deadline: float = DEFAULT_DEADLINE,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        register_secret(token)
        headers = {
            "Authorization": f"Token token={token}",
            "Accept": PAGERDUTY_ACCEPT,
            "Content-Type": "application/json",
        }
        super().__init__(base_url, headers, deadline=deadline, transport=transport)

    @staticmethod
    def params(schedule_id: str, offset: int = 0) -> list[tuple[str, str]]:
        """The query of one page (``[]`` names, as the API documents them)."""
        params = [
            ("schedule_ids[]", schedule_id),
            ("earliest", "true"),
            ("include[]", "users"),
            ("limit", str(_PAGE)),
        ]
        return params + ([("offset", str(offset))] if offset else [])

    async def on_call(self, schedule_id: str) -> list[OnCallPerson]:
        until = time.monotonic() + self.deadline
        people: list[OnCallPerson] = []
        offset = 0
        for _ in range(_MAX_PAGES):
            page = await self._get(
                schedule_id,
                "/oncalls",
                self.params(schedule_id, offset),
                PagerDutyOncalls,
                until=until,
            )
            people += pagerduty_people(page)
            if not page.more or not page.oncalls:
                break
            offset += len(page.oncalls)
        return lowest_levels(people)  # a user on several pages or levels: their lowest


class OpsgenieClient(_Client):
    """Opsgenie ``GET /v2/schedules/{id}/on-calls``: the schedule's participants now."""

    source: Source = "opsgenie"

    def __init__(
        self,
        token: str,
        base_url: str = OPSGENIE_URL,
        *,
        deadline: float = DEFAULT_DEADLINE,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        register_secret(token)
        headers = {"Authorization": f"GenieKey {token}", "Accept": "application/json"}
        super().__init__(base_url, headers, deadline=deadline, transport=transport)

    @staticmethod
    def path(schedule_id: str) -> str:
        return f"/v2/schedules/{quote(schedule_id, safe='')}/on-calls"

    @staticmethod
    def params() -> list[tuple[str, str]]:
        return [("scheduleIdentifierType", "id"), ("flat", "false")]

    async def on_call(self, schedule_id: str) -> list[OnCallPerson]:
        until = time.monotonic() + self.deadline
        answer = await self._get(
            schedule_id,
            self.path(schedule_id),
            self.params(),
            OpsgenieOnCallResponse,
            until=until,
        )
        return opsgenie_people(answer)
