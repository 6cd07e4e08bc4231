"""What one request costs, as /metrics counts it: SQL statements and transactions of the
state store, and the HTTP calls to Slack by Web API method — checked against what the
database and the Slack stand-in actually received."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from bot.core.authorizer import AccessDecision
from bot.core.policy import Role
from bot.core.store import normalize_database_url
from bot.core.store.engine import create_engine
from bot.local.demo.stack import LocalStack
from bot.metrics import STORE_STATEMENTS, STORE_TRANSACTIONS
from bot.slack.calls import slack_method

DAVE, CHANNEL, CLUSTER = "U04DAVE", "C0INCIDENT", "tc-h200-ondemand"


def samples(metrics: str, name: str) -> dict[str, float]:
    """``name``'s samples in a /metrics text, by their ``method`` label ("" without)."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == name:
                found[sample.labels.get("method", "")] = float(sample.value)
    return found


def grown(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


async def read_metrics(stack: LocalStack) -> str:
    async with httpx.AsyncClient(base_url=stack.base_url) as client:
        response = await client.get("/metrics")
    assert response.status_code == 200
    return response.text


async def test_an_update_is_counted_statement_by_statement_and_call_by_call(
    sqlite_stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """And its operator grant is decided once, though the command and the opening of the
    change both require it."""
    stack = sqlite_stack
    authorizer = stack.runtime.authorizer
    decide = authorizer._decide
    decided: list[tuple[str, str]] = []

    async def counted(
        user: str, project: str, channel: str | None, needed: Role, action: str
    ) -> AccessDecision:
        decided.append((user, project))
        return await decide(user, project, channel, needed, action)

    monkeypatch.setattr(authorizer, "_decide", counted)
    before = await read_metrics(stack)
    calls_before = len(stack.slack.calls)
    posts_before = len(stack.slack.response_posts)
    text_ = f'update together-prod {CLUSTER} num_gpus=16 reason="counted"'
    result = await stack.sender.command(DAVE, CHANNEL, text_)
    assert result.status == 200

    def summary() -> bool:
        return any(
            m.is_reply and (m.blocks or [{}])[0].get("type") == "header"
            for m in stack.slack.messages.get(CHANNEL, [])
        )

    await stack.slack.wait_for(summary, within=10)
    await stack.runtime.workflow.drain()
    after = await read_metrics(stack)
    received = Counter(call.method for call in stack.slack.calls[calls_before:])

    slack = grown(
        samples(before, "gpuops_slack_calls_total"), samples(after, "gpuops_slack_calls_total")
    )
    web_api = {m: n for m, n in slack.items() if m not in ("response_url", "file_upload")}
    assert web_api == {m: float(n) for m, n in received.items()}
    assert web_api.get("chat.postMessage", 0) >= 1
    replies = len(stack.slack.response_posts) - posts_before  # the command's own answer
    assert slack.get("response_url", 0.0) == replies >= 1
    statements = grown(
        samples(before, "gpuops_store_statements_total"),
        samples(after, "gpuops_store_statements_total"),
    )
    transactions = grown(
        samples(before, "gpuops_store_transactions_total"),
        samples(after, "gpuops_store_transactions_total"),
    )
    assert statements[""] >= transactions[""] >= 1
    assert decided == [(DAVE, "together-prod")]


async def test_statements_and_transactions_are_counted_without_the_begin(
    tmp_path: Path,
) -> None:
    engine = create_engine(
        normalize_database_url(f"sqlite:///{tmp_path / 'counted.db'}"),
        schema=None,
        echo=False,
        connect_timeout=5,
        statement_timeout=5,
    )
    statements, transactions = STORE_STATEMENTS._value.get(), STORE_TRANSACTIONS._value.get()
    try:
        async with engine.begin() as conn:  # BEGIN, two statements, COMMIT
            await conn.execute(text("SELECT 1"))
            await conn.execute(text("SELECT 2"))
        async with engine.connect() as conn:
            async with conn.begin():
                await conn.execute(text("SELECT 3"))
            assert STORE_TRANSACTIONS._value.get() == transactions + 2
    finally:
        await engine.dispose()
    assert STORE_STATEMENTS._value.get() == statements + 3


def test_each_slack_request_is_labelled_by_what_it_is() -> None:
    assert slack_method("/api/chat.postMessage") == "chat.postMessage"
    assert slack_method("/slack/api/views.open/") == "views.open"
    assert slack_method("/response/abc123") == "response_url"
    assert slack_method("/commands/T0/1/xyz") == "response_url"
    assert slack_method("/upload/v1/token") == "file_upload"
