"""Slack delivery de-duplication: a key is new exactly once, across replicas."""

from __future__ import annotations

import secrets
from datetime import datetime

from sqlalchemy import delete, insert

from bot.core.store.engine import StoreBase, require_aware, utcnow
from bot.core.store.tables import deliveries

# A key long enough to need a page of its own in SQLite's index (4 KiB pages), short
# enough for a PostgreSQL btree entry (at most about 2.7 kB).
_ROOM_PROBE_BYTES = 2000
_ROOM_PROBE_PREFIX = "gpuops:room-probe:"


class DeliveriesMixin(StoreBase):
    async def remember_delivery(self, key: str) -> bool:
        """True the first time ``key`` is seen (across replicas), False every time after."""
        statement = (
            self._insert(deliveries)
            .values(key=key, seen_at=utcnow())
            .on_conflict_do_nothing(index_elements=[deliveries.c.key])
            .returning(deliveries.c.key)
        )
        async with self._begin() as conn:
            return (await conn.execute(statement)).first() is not None

    async def prune_deliveries(self, older_than: datetime) -> int:
        """Forget delivery keys first seen before ``older_than``; returns how many."""
        require_aware("older_than", older_than)
        statement = delete(deliveries).where(deliveries.c.seen_at < older_than)
        async with self._begin() as conn:
            result = await conn.execute(statement)
        return result.rowcount

    async def probe_room(self) -> None:
        """StoreUnavailable unless the store takes what a change needs: a new row (with
        room for it, an index page of its own) written and removed in one committed
        transaction. A full disk fails it, a read-only database too; it leaves nothing."""
        key = f"{_ROOM_PROBE_PREFIX}{secrets.token_hex(_ROOM_PROBE_BYTES // 2)}"
        async with self._begin() as conn:
            await conn.execute(insert(deliveries).values(key=key, seen_at=utcnow()))
            await conn.execute(delete(deliveries).where(deliveries.c.key == key))
