"""Personal tokens for agents (SPEC §15): stored as the SHA-256 of the token, never the
token itself; each tied to one person and a name unique among theirs, expiring, revocable.

``use`` is the one statement every agent call makes: it finds a live token by its hash and
counts the call in the token's rate window (a fixed window, restarted when it has passed),
so two replicas share one count. The database picks the answer; nothing is read first."""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict
from sqlalchemy import and_, case, delete, literal, or_, select, update

from bot.core.store.db import Store
from bot.core.store.engine import require_aware
from bot.core.store.tables import tokens


class TokenRecord(BaseModel):
    """A token as stored: its hash, never the token."""

    model_config = ConfigDict(frozen=True)

    hash: str
    user_id: str
    name: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    last_used_at: datetime | None = None
    last_client: str | None = None
    window_start: datetime | None = None
    window_calls: int = 0

    def live(self, now: datetime) -> bool:
        return self.revoked_at is None and self.expires_at > now


class TokenStore:
    """The tokens table in the gpuops database (shares the Store's engine)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def add(
        self, *, hash: str, user_id: str, name: str, expires_at: datetime, now: datetime
    ) -> TokenRecord | None:
        """Store a new token; a revoked or expired one of the same name and person is
        replaced in the same transaction. None when a live one has the name."""
        require_aware("expires_at", expires_at)
        dead = or_(tokens.c.revoked_at.is_not(None), tokens.c.expires_at <= now)
        insert = (
            self.store._insert(tokens)
            .values(
                hash=hash,
                user_id=user_id,
                name=name,
                created_at=now,
                expires_at=expires_at,
                window_calls=0,
            )
            .on_conflict_do_nothing()
            .returning(*tokens.c)
        )
        async with self.store._begin() as conn:
            await conn.execute(
                delete(tokens).where(tokens.c.user_id == user_id, tokens.c.name == name, dead)
            )
            row = (await conn.execute(insert)).mappings().first()
        return None if row is None else TokenRecord.model_validate(dict(row))

    async def of_user(self, user_id: str, limit: int = 50) -> list[TokenRecord]:
        """The person's tokens, live or not, newest first."""
        statement = (
            select(tokens)
            .where(tokens.c.user_id == user_id)
            .order_by(tokens.c.created_at.desc(), tokens.c.name.desc())  # the index backwards
            .limit(limit)
        )
        async with self.store._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [TokenRecord.model_validate(dict(row)) for row in rows]

    async def by_hash(self, hash: str) -> TokenRecord | None:
        async with self.store._begin() as conn:
            row = (await conn.execute(select(tokens).where(tokens.c.hash == hash))).mappings()
            found = row.first()
        return None if found is None else TokenRecord.model_validate(dict(found))

    async def revoke(
        self, user_id: str, name: str, *, by: str, now: datetime
    ) -> TokenRecord | None:
        """Revoke the person's live token of that name: the token as revoked, None when
        there is no such live token."""
        statement = (
            update(tokens)
            .where(
                tokens.c.user_id == user_id,
                tokens.c.name == name,
                tokens.c.revoked_at.is_(None),
                tokens.c.expires_at > now,
            )
            .values(revoked_at=now, revoked_by=by)
            .returning(*tokens.c)
        )
        async with self.store._begin() as conn:
            row = (await conn.execute(statement)).mappings().first()
        return None if row is None else TokenRecord.model_validate(dict(row))

    async def use(
        self, hash: str, *, client: str | None, now: datetime, window: timedelta
    ) -> TokenRecord | None:
        """Count one call with a live token in its rate window (restarted when it has
        passed): the token with the count including this call; None when no live token has
        that hash (unknown, expired or revoked: ``by_hash`` tells which)."""
        started = literal(now, tokens.c.window_start.type)
        fresh = and_(tokens.c.window_start.is_not(None), tokens.c.window_start > now - window)
        statement = (
            update(tokens)
            .where(tokens.c.hash == hash, tokens.c.revoked_at.is_(None), tokens.c.expires_at > now)
            .values(
                window_calls=case((fresh, tokens.c.window_calls + 1), else_=1),
                window_start=case((fresh, tokens.c.window_start), else_=started),
                last_used_at=now,
                last_client=client,
            )
            .returning(*tokens.c)
        )
        async with self.store._begin() as conn:
            row = (await conn.execute(statement)).mappings().first()
        return None if row is None else TokenRecord.model_validate(dict(row))
