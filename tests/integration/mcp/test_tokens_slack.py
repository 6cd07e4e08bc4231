"""Personal tokens in Slack end to end (SPEC §15): ``/gpu token new`` answers ephemerally
with the token once, ``/gpu token list`` and the Home tab list it, Home's Revoke ends it;
the store holds only its hash and no log line holds the token."""

from __future__ import annotations

import json
import logging
import re

import pytest
from sqlalchemy import select

from bot.core.agents.tokens import token_hash
from bot.core.store.tables import tokens as tokens_table
from bot.local.demo.stack import LocalStack
from bot.redact import redact
from tests.conftest import StackFactory
from tests.support.slack_support import whisper
from tests.support.workflow_kit import CHANNEL, DAVE

TOKEN = re.compile(r"gpo_[A-Za-z0-9_\-]{40,}")


async def published_after(stack: LocalStack, user: str, seen: int, needle: str) -> str:
    def fresh() -> str | None:
        home = stack.slack.home_of(user)
        if home is None or len(home.history) + 1 <= seen:
            return None
        text = json.dumps(home.blocks)
        return text if needle in text else None

    return await stack.slack.wait_for(fresh, within=15)


def home_versions(stack: LocalStack, user: str) -> int:
    home = stack.slack.home_of(user)
    return 0 if home is None else len(home.history) + 1


async def test_a_token_made_in_slack_is_listed_on_home_and_revoked_there(
    make_stack: StackFactory, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    stack = await make_stack(
        database_url=database_url, extra_settings={"gpuops_home_refresh_seconds": 0.2}
    )
    made = await whisper(stack, DAVE, CHANNEL, "token new ttl=3d name=laptop")
    found = TOKEN.search(made.text)
    assert found is not None, made.text
    token = found.group(0)
    listed = await whisper(stack, DAVE, CHANNEL, "token list")
    assert "`laptop`" in listed.text and token not in listed.text

    seen = home_versions(stack, DAVE)
    assert (await stack.sender.app_home_opened(DAVE)).status == 200
    home = await published_after(stack, DAVE, seen, "laptop")
    assert "revoke_token" in home and token not in home

    seen = home_versions(stack, DAVE)
    clicked = await stack.sender.home_action(DAVE, action_id="revoke_token", value="laptop")
    assert clicked.status == 200, clicked
    await published_after(stack, DAVE, seen, "gpuops")
    dm = await stack.slack.wait_for(
        lambda: next(
            (
                m
                for m in stack.slack.messages.get(stack.slack.dm_channel(DAVE), [])
                if "revoked" in m.text
            ),
            None,
        )
    )
    assert "`laptop` is revoked" in dm.text
    assert "revoke_token" not in json.dumps(stack.slack.home_of(DAVE).blocks)  # type: ignore[union-attr]

    async with stack.runtime.store._begin() as conn:
        rows = [dict(r) for r in (await conn.execute(select(tokens_table))).mappings().all()]
    assert [r["hash"] for r in rows] == [token_hash(token)]
    assert rows[0]["revoked_by"] == DAVE
    trail = await stack.runtime.store.list_audit(limit=20)
    assert {"token_created", "token_revoked"} <= {e.event for e in trail}
    assert all(token not in json.dumps(e.model_dump(mode="json")) for e in trail)
    # What any handler writes: the root's handlers redact every line (bot.redact); the DEBUG
    # line of slack_sdk's response_url post holds the answer, the token masked.
    logged = [redact(r.getMessage()) for r in caplog.records]
    assert all(token not in line for line in logged)
    assert any("gpo_***" in line for line in logged)
