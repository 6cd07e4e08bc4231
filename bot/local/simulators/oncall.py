"""PagerDuty and Opsgenie stand-ins for the on-call reads (SPEC §16): schedules whose
shifts rotate with a clock the test or the demo moves, over real HTTP on 127.0.0.1.

Each schedule has levels (PagerDuty's escalation levels; Opsgenie reports level 1 only),
each level a rotation: its users take turns, one shift each, counted from the epoch.

- PagerDuty: ``GET /oncalls`` (``schedule_ids[]``, ``earliest``, ``include[]=users``,
  ``limit``, ``offset``), ``Authorization: Token token=…`` or 401 as PagerDuty answers it.
- Opsgenie: ``GET /v2/schedules/{id}/on-calls`` (``scheduleIdentifierType``, ``flat``),
  ``Authorization: GenieKey …`` or 401; an unknown schedule is 404.

Control endpoints: ``POST /_sim/clock`` (``{"now": ISO}`` or ``{"advance_seconds": n}``),
``GET /_sim/clock``, ``PUT /_sim/schedules/{id}`` (a ``ScheduleSpec``), ``POST /_sim/faults``
(the provider simulators' faults: latency, rate_limit, server_error, malformed, hang),
``DELETE /_sim/faults``, ``GET /_sim/requests``, ``POST /_sim/reset``.
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.local.simulators.base import (
    Fault,
    FaultInjector,
    RecordedRequest,
    fault_before,
    json_response,
)


class SimUser(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    email: str


class Rotation(BaseModel):
    """Users taking turns, ``shift_hours`` each, the first from ``epoch``."""

    model_config = ConfigDict(extra="forbid")

    users: list[str] = Field(min_length=1)
    shift_hours: float = Field(default=8.0, gt=0)

    def on_call(self, epoch: datetime, now: datetime) -> tuple[str, datetime, datetime]:
        """Who is on call at ``now``, and their shift's start and end."""
        shift = timedelta(hours=self.shift_hours)
        turn = math.floor((now - epoch) / shift)
        start = epoch + turn * shift
        return self.users[turn % len(self.users)], start, start + shift


class ScheduleSpec(BaseModel):
    """A schedule: its name, its levels' rotations (level 1 first) and their epoch."""

    model_config = ConfigDict(extra="forbid")

    name: str
    levels: list[Rotation] = Field(min_length=1)
    epoch: datetime = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class OnCallShift:
    user: SimUser
    level: int
    start: datetime
    end: datetime


DEMO_USERS = [
    SimUser(id="PBOB0001", name="Bob", email="bob@example.com"),
    SimUser(id="PCAROL01", name="Carol", email="carol@example.com"),
    SimUser(id="PALICE01", name="Alice", email="alice@example.com"),
    SimUser(id="PDAVE001", name="Dave", email="dave@example.com"),
]
# Bob is on call from 00:00 to 12:00 UTC, Carol from 12:00 to 24:00; Alice behind them.
DEMO_SCHEDULES = {
    "PPLATFRM": ScheduleSpec(
        name="Platform primary",
        levels=[
            Rotation(users=["PBOB0001", "PCAROL01"], shift_hours=12),
            Rotation(users=["PALICE01"], shift_hours=24),
        ],
    )
}


class OnCallSimulator:
    """What both on-call stand-ins share: users, schedules, the clock, faults, the log."""

    name = "oncall"
    prefix = ""

    def __init__(
        self,
        token: str,
        users: list[SimUser] | None = None,
        schedules: dict[str, ScheduleSpec] | None = None,
        now: datetime | None = None,
    ) -> None:
        self.token = token
        self._seed = (list(users or DEMO_USERS), dict(schedules or DEMO_SCHEDULES), now)
        self.users: dict[str, SimUser] = {}
        self.schedules: dict[str, ScheduleSpec] = {}
        self.now = datetime.now(UTC)
        self.faults = FaultInjector()
        self.requests: list[RecordedRequest] = []
        self.reset()
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.app = web.Application()
        self.app.router.add_post("/_sim/clock", self._post_clock)
        self.app.router.add_get("/_sim/clock", self._get_clock)
        self.app.router.add_put("/_sim/schedules/{schedule_id}", self._put_schedule)
        self.app.router.add_post("/_sim/faults", self._post_fault)
        self.app.router.add_delete("/_sim/faults", self._clear_faults)
        self.app.router.add_get("/_sim/requests", self._get_requests)
        self.app.router.add_post("/_sim/reset", self._reset)
        self.add_routes(self.app)

    def add_routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        raise NotImplementedError

    # -- the model ----------------------------------------------------------------------
    def reset(self) -> None:
        users, schedules, now = self._seed
        self.users = {u.id: u for u in users}
        self.schedules = {k: v.model_copy(deep=True) for k, v in schedules.items()}
        self.now = now or datetime.now(UTC)
        self.faults.clear()
        self.requests.clear()

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def set_schedule(self, schedule_id: str, spec: ScheduleSpec) -> None:
        self.schedules[schedule_id] = spec

    def on_call(self, schedule_id: str) -> list[OnCallShift]:
        """Who is on call now on the schedule, level by level."""
        spec = self.schedules.get(schedule_id)
        if spec is None:
            return []
        shifts = []
        for level, rotation in enumerate(spec.levels, start=1):
            user_id, start, end = rotation.on_call(spec.epoch, self.now)
            shifts.append(OnCallShift(self.users[user_id], level, start, end))
        return shifts

    def calls(self, route: str | None = None) -> list[RecordedRequest]:
        return [r for r in self.requests if route is None or r.route == route]

    async def record(self, route: str, request: web.Request) -> None:
        self.requests.append(
            RecordedRequest(
                route=route,
                method=request.method,
                path=request.path,
                query=dict(request.query),
                headers={k.lower(): v for k, v in request.headers.items()},
                body=None,
            )
        )

    async def before(self, route: str, request: web.Request) -> web.StreamResponse | None:
        """Record the call; the fault's answer, if one is armed for the route."""
        await self.record(route, request)
        fault = self.faults.take(route)
        return await fault_before(
            fault, lambda status, message, **_: self.error_body(status, message)
        )

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        assert server is not None
        self.port = (getattr(server, "sockets", None) or [])[0].getsockname()[1]
        return self.base_url

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- control endpoints --------------------------------------------------------------
    async def _post_clock(self, request: web.Request) -> web.Response:
        body = await _json(request)
        if isinstance(body, dict) and isinstance(body.get("now"), str):
            try:
                moved = datetime.fromisoformat(body["now"])
            except ValueError:
                return json_response(400, {"ok": False, "error": "now: not an ISO time"})
            if moved.tzinfo is None:
                return json_response(400, {"ok": False, "error": "now: give the time zone"})
            self.now = moved.astimezone(UTC)
        elif isinstance(body, dict) and isinstance(body.get("advance_seconds"), int | float):
            self.advance(float(body["advance_seconds"]))
        else:
            problem = 'send {"now": ISO time} or {"advance_seconds": n}'
            return json_response(400, {"ok": False, "error": problem})
        return json_response(200, {"ok": True, "now": self.now.isoformat()})

    async def _get_clock(self, request: web.Request) -> web.Response:
        return json_response(200, {"now": self.now.isoformat()})

    async def _put_schedule(self, request: web.Request) -> web.Response:
        try:
            spec = ScheduleSpec.model_validate(await _json(request))
        except ValidationError as exc:
            return json_response(400, {"ok": False, "error": str(exc.errors()[0]["msg"])})
        unknown = [u for r in spec.levels for u in r.users if u not in self.users]
        if unknown:
            return json_response(400, {"ok": False, "error": f"unknown users: {unknown}"})
        self.set_schedule(request.match_info["schedule_id"], spec)
        return json_response(200, {"ok": True})

    async def _post_fault(self, request: web.Request) -> web.Response:
        try:
            self.faults.add(Fault.model_validate(await _json(request)))
        except ValidationError as exc:
            return json_response(400, {"ok": False, "error": str(exc.errors()[0]["msg"])})
        return json_response(200, {"ok": True})

    async def _clear_faults(self, request: web.Request) -> web.Response:
        self.faults.clear()
        return json_response(200, {"ok": True})

    async def _get_requests(self, request: web.Request) -> web.Response:
        log = [{"route": r.route, "path": r.path, "query": r.query} for r in self.requests]
        return json_response(200, log)

    async def _reset(self, request: web.Request) -> web.Response:
        self.reset()
        return json_response(200, {"ok": True})


class PagerDutySimulator(OnCallSimulator):
    """PagerDuty REST API v2's ``GET /oncalls``; a schedule is referenced by one escalation
    policy, ``P<schedule id>EP``, at each of its levels."""

    name = "pagerduty"

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/oncalls", self._oncalls)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        codes = {401: 2006, 429: 2020, 400: 2001}
        return {"error": {"message": message, "code": codes.get(status, 2000)}}

    def _reference(self, kind: str, id_: str, summary: str) -> dict[str, Any]:
        plural = {"user": "users", "schedule": "schedules"}.get(kind, "escalation_policies")
        return {
            "id": id_,
            "type": f"{kind}_reference",
            "summary": summary,
            "self": f"https://api.pagerduty.com/{plural}/{id_}",
            "html_url": f"https://example.pagerduty.com/{plural}/{id_}",
        }

    def _user(self, user: SimUser, full: bool) -> dict[str, Any]:
        ref = self._reference("user", user.id, user.name)
        if not full:
            return ref
        return {**ref, "type": "user", "name": user.name, "email": user.email}

    async def _oncalls(self, request: web.Request) -> web.StreamResponse:
        faulted = await self.before("oncalls", request)
        if faulted is not None:
            return faulted
        if request.headers.get("Authorization") != f"Token token={self.token}":
            return json_response(401, self.error_body(401, "Unauthorized"))
        query = request.query
        full = "users" in query.getall("include[]", [])
        try:
            limit = int(query.get("limit", "25"))
            offset = int(query.get("offset", "0"))
        except ValueError:
            return json_response(400, self.error_body(400, "Invalid Input Provided"))
        entries = []
        for schedule_id in query.getall("schedule_ids[]", []):
            spec = self.schedules.get(schedule_id)
            for shift in self.on_call(schedule_id):
                assert spec is not None
                entries.append(
                    {
                        "user": self._user(shift.user, full),
                        "schedule": self._reference("schedule", schedule_id, spec.name),
                        "escalation_policy": self._reference(
                            "escalation_policy", f"P{schedule_id}EP", f"{spec.name} policy"
                        ),
                        "escalation_level": shift.level,
                        "start": shift.start.isoformat(),
                        "end": shift.end.isoformat(),
                    }
                )
        page = entries[offset : offset + limit]
        body = {
            "oncalls": page,
            "limit": limit,
            "offset": offset,
            "more": offset + limit < len(entries),
            "total": None,
        }
        return json_response(200, body)


class OpsgenieSimulator(OnCallSimulator):
    """Opsgenie's ``GET /v2/schedules/{id}/on-calls`` (level 1 of each schedule: Opsgenie
    schedules have no escalation levels)."""

    name = "opsgenie"

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/v2/schedules/{schedule_id}/on-calls", self._on_calls)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"message": message, "took": 0.001, "requestId": str(uuid.uuid4())}

    async def _on_calls(self, request: web.Request) -> web.StreamResponse:
        faulted = await self.before("on-calls", request)
        if faulted is not None:
            return faulted
        if request.headers.get("Authorization") != f"GenieKey {self.token}":
            return json_response(401, self.error_body(401, "Could not authenticate"))
        schedule_id = request.match_info["schedule_id"]
        spec = self.schedules.get(schedule_id)
        if request.query.get("scheduleIdentifierType", "id") != "id" or spec is None:
            message = f"No schedule exists with identifier [{schedule_id}]"
            return json_response(404, self.error_body(404, message))
        level_one = [s for s in self.on_call(schedule_id) if s.level == 1]
        data: dict[str, Any] = {"_parent": {"id": schedule_id, "name": spec.name, "enabled": True}}
        if request.query.get("flat") == "true":
            data["onCallRecipients"] = [s.user.email for s in level_one]
        else:
            data["onCallParticipants"] = [
                {"id": s.user.id, "name": s.user.email, "type": "user"} for s in level_one
            ]
        return json_response(200, {"data": data, "took": 0.004, "requestId": str(uuid.uuid4())})


async def _json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None
