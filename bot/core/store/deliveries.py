"""Slack delivery de-duplication: a key is new exactly once, across replicas."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete

from bot.core.store.engine import StoreBase, require_aware, utcnow
from bot.core.store.tables import deliveries


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
