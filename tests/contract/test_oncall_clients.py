"""The on-call clients (SPEC §16) against the vendored API documents and the simulators:
PagerDuty's ``GET /oncalls`` as its OpenAPI document and its official Python client send
it, Opsgenie's ``GET /v2/schedules/{id}/on-calls`` as its OpenAPI (Swagger 2.0) document
says; the simulators' answers match the same documents; each fault reaches the caller as
OnCallUnavailable, within the deadline, with no token in its text."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import httpx2
import pagerduty
import pytest
from jsonschema import Draft4Validator

from bot.local.simulators.oncall import OpsgenieSimulator, PagerDutySimulator
from bot.providers.oncall import OnCallUnavailable, OpsgenieClient, PagerDutyClient
from bot.redact import redact
from tests.support.openapi_contract import SPECS_DIR, load_spec

PD_SPEC = load_spec("pagerduty-oncalls.openapi.json")
OG_SPEC: dict[str, Any] = json.loads(
    (SPECS_DIR / "opsgenie-who-is-on-call.swagger.json").read_text(encoding="utf-8")
)
OG_PATH = "/v2/schedules/{identifier}/on-calls"
TOKEN = "pd-contract-token-77f1"
NIGHT = datetime(2026, 12, 3, 3, 0, tzinfo=UTC)  # Bob's shift (00:00-12:00), Alice behind


@pytest.fixture
async def pd() -> AsyncIterator[PagerDutySimulator]:
    sim = PagerDutySimulator(TOKEN, now=NIGHT)
    await sim.start()
    yield sim
    await sim.stop()


@pytest.fixture
async def og() -> AsyncIterator[OpsgenieSimulator]:
    sim = OpsgenieSimulator(TOKEN, now=NIGHT)
    await sim.start()
    yield sim
    await sim.stop()


def _pd_parameters() -> dict[str, dict[str, Any]]:
    op = PD_SPEC.operation("GET", "/oncalls")
    return {p["name"]: p for p in (PD_SPEC.resolve(x) for x in op["parameters"])}


def test_pagerduty_query_and_headers_are_the_documented_ones() -> None:
    documented = _pd_parameters()
    client = PagerDutyClient(TOKEN)
    for name, value in client.params("PPLATFRM", offset=100):
        assert name in documented and documented[name]["in"] == "query", name
        schema = PD_SPEC.resolve(documented[name]["schema"])
        if schema.get("type") == "boolean":
            assert value in ("true", "false")
        if name == "include[]":
            assert value in schema["enum"]
    headers = client._http.headers
    assert headers["Accept"] == PD_SPEC.resolve(documented["Accept"]["schema"])["default"]
    scheme = PD_SPEC.doc["components"]["securitySchemes"]["api_key"]
    assert scheme["name"] == "Authorization" and "Token token=" in scheme["description"]
    assert headers["Authorization"] == f"Token token={TOKEN}"


async def test_pagerduty_request_is_the_official_clients() -> None:
    """The official ``pagerduty`` client's ``rget('/oncalls', params=…)`` and ours send the
    same method, path, query and credentials."""
    seen: dict[str, httpx.Request | httpx2.Request] = {}
    answer = {"oncalls": [], "limit": 100, "offset": 0, "more": False, "total": None}

    def official(request: httpx2.Request) -> httpx2.Response:
        seen["official"] = request
        return httpx2.Response(200, json=answer)

    def ours(request: httpx.Request) -> httpx.Response:
        seen["ours"] = request
        return httpx.Response(200, json=answer)

    theirs = pagerduty.RestApiV2Client(TOKEN, transport=httpx2.MockTransport(official))
    params = {"schedule_ids[]": ["PPLATFRM"], "earliest": "true", "include[]": ["users"]}
    # Its post-processing reads the answer's timing, which a mock transport has not: the
    # request, all this test compares, has been sent by then.
    with contextlib.suppress(RuntimeError):
        await asyncio.to_thread(theirs.rget, "/oncalls", params={**params, "limit": 100})
    client = PagerDutyClient(TOKEN, transport=httpx.MockTransport(ours))
    assert await client.on_call("PPLATFRM") == []
    await client.aclose()
    a, b = seen["official"], seen["ours"]
    assert (a.method, a.url.host, a.url.path) == (b.method, b.url.host, b.url.path)
    assert sorted(a.url.params.multi_items()) == sorted(b.url.params.multi_items())
    for header in ("Authorization", "Accept"):
        assert a.headers[header] == b.headers[header], header


async def test_pagerduty_simulator_answers_as_documented(pd: PagerDutySimulator) -> None:
    client = PagerDutyClient(TOKEN, pd.base_url)
    people = await client.on_call("PPLATFRM")
    await client.aclose()
    assert [(p.user_id, p.email, p.level) for p in people] == [
        ("PBOB0001", "bob@example.com", 1),
        ("PALICE01", "alice@example.com", 2),
    ]
    (call,) = pd.calls("oncalls")
    assert call.query["schedule_ids[]"] == "PPLATFRM" and call.query["earliest"] == "true"
    # The document's schema has user references only: with include[]=users the real API
    # puts full User objects (type "user", with email) in their place, as the simulator does.
    async with httpx.AsyncClient() as raw:
        got = await raw.get(
            f"{pd.base_url}/oncalls",
            params=[("schedule_ids[]", "PPLATFRM")],
            headers=dict(client._http.headers),
        )
    PD_SPEC.validate_response("GET", "/oncalls", got.status_code, got.json())


async def test_pagerduty_pages_are_followed(pd: PagerDutySimulator) -> None:
    from bot.providers.oncall import client as module

    module_page = module._PAGE
    module._PAGE = 1
    try:
        client = PagerDutyClient(TOKEN, pd.base_url)
        people = await client.on_call("PPLATFRM")
        await client.aclose()
    finally:
        module._PAGE = module_page
    assert [p.level for p in people] == [1, 2]
    assert [c.query.get("offset", "0") for c in pd.calls("oncalls")] == ["0", "1"]


async def test_the_rotation_follows_the_simulators_clock(pd: PagerDutySimulator) -> None:
    client = PagerDutyClient(TOKEN, pd.base_url)
    pd.advance(12 * 3600)  # 15:00: Carol's shift
    people = await client.on_call("PPLATFRM")
    await client.aclose()
    assert [p.user_id for p in people if p.level == 1] == ["PCAROL01"]


def _og_validate(schema: dict[str, Any], value: Any) -> None:
    root = {**schema, "definitions": OG_SPEC["definitions"]}
    errors = list(Draft4Validator(root).iter_errors(value))
    assert not errors, [e.message for e in errors[:3]]


async def test_opsgenie_request_and_answer_are_the_documented_ones(og: OpsgenieSimulator) -> None:
    op = OG_SPEC["paths"][OG_PATH]["get"]
    documented = {
        OG_SPEC["parameters"][p["$ref"].split("/")[-1]]["name"]: OG_SPEC["parameters"][
            p["$ref"].split("/")[-1]
        ]
        for p in op["parameters"]
    }
    client = OpsgenieClient(TOKEN, og.base_url)
    for name, value in client.params():
        assert documented[name]["in"] == "query"
        assert value in documented[name].get("enum", ["true", "false"])
    assert OG_SPEC["securityDefinitions"]["GenieKey"]["name"] == "Authorization"
    people = await client.on_call("PPLATFRM")
    await client.aclose()
    assert [(p.user_id, p.email, p.level) for p in people] == [("PBOB0001", "bob@example.com", 1)]
    (call,) = og.calls("on-calls")
    assert call.path == "/v2/schedules/PPLATFRM/on-calls"
    assert call.headers["authorization"] == f"GenieKey {TOKEN}"
    async with httpx.AsyncClient(headers=dict(client._http.headers)) as raw:
        got = await raw.get(
            f"{og.base_url}/v2/schedules/PPLATFRM/on-calls", params=tuple(client.params())
        )
    schema = op["responses"]["200"]["schema"]
    _og_validate(schema, got.json())


async def test_opsgenie_participants_inside_teams_and_escalations_count() -> None:
    nested = {
        "data": {
            "_parent": {"id": "s1", "name": "Ops", "enabled": True},
            "onCallParticipants": [
                {
                    "id": "t1",
                    "name": "TeamName",
                    "type": "team",
                    "onCallParticipants": [{"id": "u1", "name": "eve@example.com", "type": "user"}],
                },
                {"id": "u2", "name": "frank@example.com", "type": "user"},
            ],
        },
        "took": 0.1,
        "requestId": "r",
    }
    _og_validate(OG_SPEC["paths"][OG_PATH]["get"]["responses"]["200"]["schema"], nested)
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=nested))
    client = OpsgenieClient(TOKEN, transport=transport)
    people = await client.on_call("s1")
    await client.aclose()
    assert [(p.user_id, p.email) for p in people] == [
        ("u1", "eve@example.com"),
        ("u2", "frank@example.com"),
    ]


@pytest.mark.parametrize("which", ["pagerduty", "opsgenie"])
@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ({"kind": "latency", "seconds": 5}, "slow"),
        ({"kind": "hang", "seconds": 5}, "slow"),
        ({"kind": "rate_limit", "retry_after": 7}, "rate_limited"),
        ({"kind": "server_error", "status": 503}, "refused"),
        ({"kind": "malformed"}, "malformed"),
    ],
)
async def test_each_fault_is_unavailable_within_the_deadline(
    which: str,
    fault: dict[str, Any],
    expected: str,
    pd: PagerDutySimulator,
    og: OpsgenieSimulator,
) -> None:
    sim = pd if which == "pagerduty" else og
    client = (PagerDutyClient if which == "pagerduty" else OpsgenieClient)(
        TOKEN, sim.base_url, deadline=0.5
    )
    route = "oncalls" if which == "pagerduty" else "on-calls"
    async with httpx.AsyncClient() as control:
        armed = await control.post(f"{sim.base_url}/_sim/faults", json={**fault, "route": route})
        assert armed.status_code == 200
    started = time.monotonic()
    with pytest.raises(OnCallUnavailable) as caught:
        await client.on_call("PPLATFRM")
    took = time.monotonic() - started
    await client.aclose()
    assert caught.value.fault == expected
    assert took < 2.5  # the deadline (0.5 s) bounds the wait, whatever the tool does
    assert TOKEN not in str(caught.value)
    if expected == "rate_limited":
        assert "retry after 7 s" in str(caught.value)


async def test_unreachable_and_wrong_token(pd: PagerDutySimulator) -> None:
    closed = PagerDutyClient(TOKEN, "http://127.0.0.1:9", deadline=0.5)
    with pytest.raises(OnCallUnavailable) as caught:
        await closed.on_call("PPLATFRM")
    await closed.aclose()
    assert caught.value.fault == "unreachable"
    wrong = PagerDutyClient("not-the-token", pd.base_url)
    with pytest.raises(OnCallUnavailable) as refused:
        await wrong.on_call("PPLATFRM")
    await wrong.aclose()
    assert refused.value.fault == "refused" and "401" in str(refused.value)


def test_tokens_are_masked_in_any_text() -> None:
    PagerDutyClient("pd-secret-token-1234")
    OpsgenieClient("og-secret-key-5678")
    text = "Authorization: Token token=abcdefgh; Authorization: GenieKey zyxwvuts"
    assert "abcdefgh" not in redact(text) and "zyxwvuts" not in redact(text)
    assert "pd-secret-token-1234" not in redact("sent pd-secret-token-1234")
