"""Property-based fuzzing of the pure parts: the /gpu grammar only ever raises UsageError,
``primitives.escape`` neutralises every Slack control sequence and loses nothing, and whatever
a provider answers (any status, any JSON or none) the Together and E2E clients and adapters
raise nothing but ProviderError subclasses."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bot.core.ask.grammar import Command, UsageError, parse_command
from bot.local.simulators.e2e import H100, E2ESimulator, SimCluster
from bot.local.simulators.together import seed_clusters
from bot.providers.base import ChangePlan
from bot.providers.e2e import (
    AttachIpAction,
    E2EAdapter,
    E2EClient,
    ScaleClusterAction,
    build_e2e_transport,
)
from bot.providers.errors import ProviderError
from bot.providers.http import ClientSettings
from bot.providers.together import (
    ClusterUpdate,
    TogetherAdapter,
    TogetherClient,
    build_together_transport,
)
from bot.slack.render import primitives
from tests.support.catalog import CATALOG

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Each provider example runs a client over a mock transport in a fresh event loop.
FUZZ_REPLIES = settings(FUZZ, max_examples=120)
CLIENT_SETTINGS = ClientSettings(
    total_timeout=2.0, attempts=2, wait_initial=0.0, wait_max=0.0, retry_after_cap=0.0
)

# -- the /gpu grammar --------------------------------------------------------------------

WORDS = st.sampled_from(
    [
        "help", "list", "show", "update", "action", "audit", "together-prod", "e2e-delhi",
        "tc-h100-reserved", "101", "scale_cluster", "num_gpus=16", "additional_nodes=2",
        'reason="why not"', "reason='x", "=", "==", "a=b=c", '"', "'", "\u201cquoted\u201d",
        "<!channel>", "<@U0INJECT>", "<https://evil.example|click>", "-1", "1e9", "\x00",
        "ssh_key_ids=11,12", "reservation_end_time=2026-12-31T00:00:00Z", "\\", "\n", "\t",
    ]
)  # fmt: skip
COMMAND_TEXT = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(WORDS, st.text(max_size=20)), max_size=12).map(" ".join),
    st.text(min_size=4000, max_size=6000),
)


@FUZZ
@given(COMMAND_TEXT)
def test_parse_command_raises_only_usage_errors(text: str) -> None:
    try:
        command = parse_command(text, CATALOG)
    except UsageError as exc:
        assert str(exc).strip(), "a usage error must say what is wrong"
        return
    assert isinstance(command, Command)


# -- escaping ----------------------------------------------------------------------------

MARKUP = st.one_of(
    st.text(),
    st.lists(
        st.sampled_from(["<!channel>", "<!here>", "<@U123>", "<#C1>", "<https://x|y>", "&", "&lt;"])
        | st.text(max_size=5),
        max_size=10,
    ).map("".join),
)


@FUZZ
@given(MARKUP)
def test_escape_neutralises_every_control_sequence_and_loses_nothing(text: str) -> None:
    escaped = primitives.escape(text)
    assert "<" not in escaped and ">" not in escaped
    assert escaped.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") == text
    plain = primitives.plain(text)
    assert "<" not in plain and ">" not in plain


# -- provider replies --------------------------------------------------------------------

JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)
E2E_KEYS = [
    "code", "data", "errors", "message", "status_code", "detail", "id", "name", "status",
    "no_of_nodes", "total_gpu", "total_cpu", "total_memory", "sku_details", "specs", "plan",
    "image_version", "ssh_keys", "worker_nodes", "created_by", "total_page_number",
    "total_count", "ip_address", "reserved_ip_id",
]  # fmt: skip
TOGETHER_KEYS = [
    "cluster_id", "cluster_name", "cluster_type", "num_gpus", "num_reserved_gpus",
    "desired_preemptible_gpus", "num_capacity_pool_gpus", "capacity_pool_id", "billing_type",
    "status", "gpu_type", "region", "reservation_end_time", "gpu_worker_nodes", "error",
    "clusters", "message", "detail", "project_id", "control_plane_nodes", "volumes",
]  # fmt: skip


def json_values(keys: list[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        JSON_LEAF,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(
                st.one_of(st.sampled_from(keys), st.text(max_size=8)), children, max_size=6
            ),
        ),
        max_leaves=25,
    )


def mutate(base: Any, draw: st.DrawFn, keys: list[str], values: st.SearchStrategy[Any]) -> Any:
    """The valid shape with some values replaced, dropped or added at any depth."""
    if isinstance(base, dict):
        out = {}
        for key, value in base.items():
            choice = draw(st.integers(0, 9))
            if choice == 0:
                continue  # dropped
            if choice == 1:
                out[key] = draw(values)
            else:
                out[key] = mutate(value, draw, keys, values)
        if draw(st.booleans()):
            out[draw(st.sampled_from(keys))] = draw(values)
        return out
    if isinstance(base, list):
        return [mutate(v, draw, keys, values) for v in base[: draw(st.integers(0, 3))]]
    return draw(values) if draw(st.integers(0, 4)) == 0 else base


E2E_JSON = json_values(E2E_KEYS)
TOGETHER_JSON = json_values(TOGETHER_KEYS)
E2E_SIM = E2ESimulator()
E2E_DETAIL = E2E_SIM.detail(SimCluster(101, "train-h100-a", 12345, "Running", 2, sku=H100))
E2E_VALID = [
    {"code": 200, "data": E2E_DETAIL, "errors": {}, "message": "Success"},
    {
        "code": 200,
        "data": [E2E_SIM.list_item(SimCluster(101, "a", 12345, "Running", 2))],
        "errors": {},
        "message": "Success",
        "total_page_number": 1,
        "total_count": 1,
    },
    {"code": 200, "data": {"id": 501, "ip_address": "10.0.0.1"}, "errors": {}, "message": "ok"},
]


def trimmed(value: Any) -> Any:
    """A valid shape cut down (lists to one item) so that mutating it stays cheap."""
    if isinstance(value, dict):
        return {k: trimmed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [trimmed(v) for v in value[:1]]
    return value


TOGETHER_VALID = [trimmed(c) for c in seed_clusters(datetime.now(UTC)).values()]


@st.composite
def e2e_bodies(draw: st.DrawFn) -> Any:
    if draw(st.booleans()):
        return mutate(draw(st.sampled_from(E2E_VALID)), draw, E2E_KEYS, E2E_JSON)
    return draw(E2E_JSON)


@st.composite
def together_bodies(draw: st.DrawFn) -> Any:
    choice = draw(st.integers(0, 2))
    if choice == 0:
        return mutate(draw(st.sampled_from(TOGETHER_VALID)), draw, TOGETHER_KEYS, TOGETHER_JSON)
    if choice == 1:
        clusters = [mutate(c, draw, TOGETHER_KEYS, TOGETHER_JSON) for c in TOGETHER_VALID[:2]]
        return {"clusters": draw(st.sampled_from([clusters, draw(TOGETHER_JSON)]))}
    return draw(TOGETHER_JSON)


STATUS = st.one_of(
    st.sampled_from([200, 201, 204, 400, 401, 403, 404, 409, 412, 422, 429, 500, 502, 503]),
    st.integers(100, 599),
)
RAW = st.one_of(st.binary(max_size=200), st.just(b""), st.just(b"{"), st.just(b"null"))


@st.composite
def replies(draw: st.DrawFn, bodies: st.SearchStrategy[Any]) -> tuple[int, bytes, dict[str, str]]:
    status = draw(STATUS)
    body = draw(RAW) if draw(st.integers(0, 5)) == 0 else json.dumps(draw(bodies)).encode()
    headers = {"Content-Type": "application/json"}
    if draw(st.booleans()):
        headers["Retry-After"] = draw(st.sampled_from(["0", "1", "-5", "abc", "1e99", ""]))
    return status, body, headers


Call = Callable[[Any], Awaitable[Any]]


def run_against(
    reply: tuple[int, bytes, dict[str, str]],
    build: Callable[[httpx.MockTransport], Any],
    call: Call,
) -> None:
    status, body, headers = reply

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers=headers)

    async def go() -> None:
        target = build(httpx.MockTransport(answer))
        try:
            await call(target)
        except ProviderError as exc:
            assert exc.user_message.strip()
        finally:
            await target.aclose()

    asyncio.run(go())


def e2e_adapter(transport: httpx.MockTransport) -> E2EAdapter:
    http = build_e2e_transport(
        "fuzz-key", "fuzz-token", "http://e2e.invalid/api", CLIENT_SETTINGS, transport
    )
    return E2EAdapter(E2EClient(http, project_id=12345, location="Delhi"), "e2e-delhi")


def together_adapter(transport: httpx.MockTransport) -> TogetherAdapter:
    http = build_together_transport(
        "fuzz-key", "http://together.invalid/v1", CLIENT_SETTINGS, transport
    )
    return TogetherAdapter(TogetherClient(http, "proj-123"), "together-prod")


def e2e_plan(action: str, body: dict[str, Any]) -> ChangePlan:
    return ChangePlan(
        provider="e2e",
        project="e2e-delhi",
        cluster_id="101",
        cluster_name="train-h100-a",
        action=action,
        body=body,
        kinds=[action],
        lines=[],
        fingerprint={},
    )


E2E_CALLS: dict[str, Call] = {
    "list": lambda a: a.list_clusters(),
    "get": lambda a: a.get_cluster("101"),
    "scale": lambda a: a.apply(
        e2e_plan("scale_cluster", ScaleClusterAction(additional_nodes=1).model_dump())
    ),
    "attach": lambda a: a.apply(
        e2e_plan("attach_ip", AttachIpAction(reserved_ip_id=501).model_dump())
    ),
}
TOGETHER_CALLS: dict[str, Call] = {
    "list": lambda a: a.list_clusters(),
    "get": lambda a: a.get_cluster("tc-h100-reserved"),
    "update": lambda a: a.client.update_cluster("tc-h100-reserved", ClusterUpdate(num_gpus=8)),
}


@FUZZ_REPLIES
@given(replies(e2e_bodies()), st.sampled_from(sorted(E2E_CALLS)))
# Found by this fuzzer: a reserved-IP reply of the wrong shape escaped as a ValidationError.
@example(reply=(200, b'{"data": {"ip_address": []}}', {}), call="attach")
def test_any_e2e_reply_gives_a_result_or_a_provider_error(
    reply: tuple[int, bytes, dict[str, str]], call: str
) -> None:
    run_against(reply, e2e_adapter, E2E_CALLS[call])


@FUZZ_REPLIES
@given(replies(together_bodies()), st.sampled_from(sorted(TOGETHER_CALLS)))
def test_any_together_reply_gives_a_result_or_a_provider_error(
    reply: tuple[int, bytes, dict[str, str]], call: str
) -> None:
    run_against(reply, together_adapter, TOGETHER_CALLS[call])


def test_the_mutation_strategy_reaches_valid_replies() -> None:
    # The fuzzers above start from these; they must parse, or the mutations prove little.
    for body in (E2E_VALID[0],):
        run_against(
            (200, json.dumps(body).encode(), {}),
            e2e_adapter,
            lambda a: _expect(a.get_cluster("101"), "train-h100-a"),
        )
    run_against(
        (200, json.dumps(TOGETHER_VALID[0]).encode(), {}),
        together_adapter,
        lambda a: _expect(a.get_cluster("tc-h100-reserved"), TOGETHER_VALID[0]["cluster_name"]),
    )


async def _expect(call: Awaitable[Any], name: str) -> None:
    state = await call
    assert state.summary.name == name
