"""The append-only audit trail: there is deliberately no update or delete."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select

from bot.core.store.engine import StoreBase, utcnow
from bot.core.store.records import AuditEntry
from bot.core.store.tables import audit


class AuditMixin(StoreBase):
    async def append_audit(
        self,
        *,
        actor: str,
        event: str,
        project: str | None = None,
        cluster_id: str | None = None,
        request_id: str | None = None,
        outcome: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> AuditEntry:
        statement = (
            audit.insert()
            .values(
                at=utcnow(),
                actor=actor,
                event=event,
                project=project,
                cluster_id=cluster_id,
                request_id=request_id,
                outcome=outcome,
                detail=dict(detail or {}),
            )
            .returning(audit)
        )
        async with self._begin() as conn:
            row = (await conn.execute(statement)).mappings().one()
        return AuditEntry.model_validate(dict(row))

    async def list_audit(
        self, *, project: str | None = None, request_id: str | None = None, limit: int = 20
    ) -> list[AuditEntry]:
        """Audit entries matching every given filter, newest first."""
        statement = select(audit)
        if project is not None:
            statement = statement.where(audit.c.project == project)
        if request_id is not None:
            statement = statement.where(audit.c.request_id == request_id)
        statement = statement.order_by(audit.c.id.desc()).limit(limit)
        async with self._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [AuditEntry.model_validate(dict(row)) for row in rows]
