"""Personal tokens for agents (SPEC §15): ``/gpu token new|list|revoke``, the check at each
agent call (expired, revoked, unknown, rate limited) and that only a hash is stored."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select

from bot.core.agents.tokens import TokenRefused, Tokens, token_hash
from bot.core.store.tables import tokens as tokens_table
from tests.support.core_harness import ALICE, DAVE, Core

TOKEN = re.compile(r"gpo_[A-Za-z0-9_\-]{40,}")
pytestmark = pytest.mark.asyncio


def issued(text: str) -> str:
    found = TOKEN.search(text)
    assert found is not None, text
    return found.group(0)


async def stored_rows(core: Core) -> list[dict[str, object]]:
    async with core.store._begin() as conn:
        return [dict(r) for r in (await conn.execute(select(tokens_table))).mappings().all()]


async def test_a_token_is_shown_once_and_stored_as_its_hash(core: Core) -> None:
    text = await core.answer(DAVE, "token new ttl=2d name=laptop")
    token = issued(text)
    assert "`laptop`" in text and "shown this once" in text
    rows = await stored_rows(core)
    assert [r["hash"] for r in rows] == [token_hash(token)]
    assert all(token not in repr(r) for r in rows)
    trail = await core.store.list_audit(limit=10)
    assert [e.event for e in trail][:1] == ["token_created"]
    assert all(token not in repr(e) for e in trail)
    caller = await core.ops.tokens.check(token, "claude-code")
    assert (caller.user, caller.token, caller.client) == (DAVE, "laptop", "claude-code")
    listing = await core.answer(DAVE, "token list")
    assert "`laptop`" in listing and "by claude-code" in listing


async def test_lifetimes_are_bounded_and_names_unique(core: Core) -> None:
    assert "at most 30 days" in await core.answer(DAVE, "token new ttl=31d")
    assert "not a lifetime" in await core.answer(DAVE, "token new ttl=soon")
    issued(await core.answer(DAVE, "token new name=ci"))
    again = await core.answer(DAVE, "token new name=ci")
    assert "already have a live token named `ci`" in again
    assert len(await stored_rows(core)) == 1


async def test_expired_revoked_and_unknown_tokens_are_refused_clearly(core: Core) -> None:
    token = issued(await core.answer(DAVE, "token new ttl=1h name=short"))
    core.clock.advance(hours=2)
    with pytest.raises(TokenRefused) as expired:
        await core.ops.tokens.check(token, "agent")
    assert expired.value.kind == "expired" and "`short` expired" in expired.value.message
    fresh = issued(await core.answer(DAVE, "token new name=short"))  # the name is free
    assert "revoked" in await core.answer(DAVE, "token revoke short")
    with pytest.raises(TokenRefused) as revoked:
        await core.ops.tokens.check(fresh, "agent")
    assert revoked.value.kind == "revoked"
    with pytest.raises(TokenRefused) as unknown:
        await core.ops.tokens.check("gpo_not-a-token", "agent")
    assert unknown.value.kind == "unknown" and "/gpu token new" in unknown.value.message
    assert "no live token named `short`" in await core.answer(DAVE, "token revoke short")


async def test_each_token_has_a_rate_window(core: Core) -> None:
    tokens = Tokens(core.access, core.ops.tokens.store, calls_per_minute=3, clock=core.clock)
    token = issued(await core.answer(ALICE, "token new name=busy"))
    for _ in range(3):
        await tokens.check(token, "agent")
    with pytest.raises(TokenRefused) as limited:
        await tokens.check(token, "agent")
    assert limited.value.kind == "rate_limited" and "more than 3 calls" in limited.value.message
    core.clock.advance(seconds=61)
    assert (await tokens.check(token, "agent")).user == ALICE


async def test_someone_without_any_grant_gets_no_token(core: Core) -> None:
    text = await core.answer("U09NOBODY", "token new")
    assert "no grant on any project" in text
    assert await stored_rows(core) == []
