"""Slack delivery de-duplication: a key is new exactly once, across replicas."""

from __future__ import annotations

import secrets
from datetime import datetime

from sqlalchemy import bindparam, delete, insert
from sqlalchemy.dialects import postgresql, sqlite

from bot.core.store.engine import StoreBase, require_aware, utcnow
from bot.core.store.tables import deliveries

# A key long enough to need a page of its own in SQLite's index (4 KiB pages), short
# enough for a PostgreSQL btree entry (at most about 2.7 kB).
_ROOM_PROBE_BYTES = 2000
_ROOM_PROBE_PREFIX = "gpuops:room-probe:"


# Built once (every Slack delivery runs it): a call only binds the key and the time.
_REMEMBER = {
    name: dialect.insert(deliveries)
    .on_conflict_do_nothing(index_elements=[deliveries.c.key])
    .returning(deliveries.c.key)
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}
_PRUNE = delete(deliveries).where(deliveries.c.seen_at < bindparam("b_before"))


class DeliveriesMixin(StoreBase):
    async def remember_delivery(self, key: str) -> bool:
        """True the first time ``key`` is seen (across replicas), False every time after."""
        params = {"key": key, "seen_at": utcnow()}
        async with self._begin() as conn:
            return (await conn.execute(_REMEMBER[self._dialect], params)).first() is not None

    async def prune_deliveries(self, older_than: datetime) -> int:
        """Forget delivery keys first seen before ``older_than``; returns how many."""
        require_aware("older_than", older_than)
        async with self._begin() as conn:
            result = await conn.execute(_PRUNE, {"b_before": older_than})
        return result.rowcount

    async def probe_room(self) -> None:
        """StoreUnavailable unless the store takes what a change needs: a new row (with
        room for it, an index page of its own) written and removed in one committed
        transaction. A full disk fails it, a read-only database too; it leaves nothing."""
        key = f"{_ROOM_PROBE_PREFIX}{secrets.token_hex(_ROOM_PROBE_BYTES // 2)}"
        async with self._begin() as conn:
            await conn.execute(insert(deliveries).values(key=key, seen_at=utcnow()))
            await conn.execute(delete(deliveries).where(deliveries.c.key == key))
