"""A year of history in the store, fast: ``make bench-scale`` preloads each size with this.

The rows are those of the product's own schema (``bot.core.store.tables``), made from one
request the product itself stored (its row and its audit entries are the template), spread
evenly over the year before ``now``. Each request has three audit entries (requested,
approved, succeeded a minute apart), hashed in Python with the product's own chain code
(``bot.core.store.chain.entry_hash``) and written in id order with the chain head set after
them, so ``gpuops audit verify`` walks one intact chain. Rows go in with executemany, in
batches, in one transaction per batch.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update

from bot.core.store import Store
from bot.core.store.chain import CHAIN_NAME, GENESIS_HASH, entry_hash, stored_detail
from bot.core.store.tables import audit, audit_chain, change_requests

BATCH = 20_000  # requests per transaction (with their 60,000 audit entries)
YEAR = timedelta(days=365)
HISTORY_CHANNEL = "C0HISTORY"  # where the history's requests were made (not the bench's)
_EVENTS = ("requested", "approved", "succeeded")
_FINISHED = ("succeeded", "succeeded", "succeeded", "failed", "denied", "cancelled", "expired")


@dataclass(frozen=True)
class Template:
    """One request as the product stored it, and its audit entries (oldest first)."""

    request: dict[str, Any]
    entries: list[dict[str, Any]]


async def read_template(store: Store, request_id: str) -> Template:
    """The stored row of ``request_id`` and its audit entries, to copy."""
    async with store._engine.connect() as conn:
        row = (
            (await conn.execute(select(change_requests).where(change_requests.c.id == request_id)))
            .mappings()
            .one()
        )
        statement = select(audit).where(audit.c.request_id == request_id).order_by(audit.c.id)
        entries = [dict(e) for e in (await conn.execute(statement)).mappings().all()]
    if not entries:
        raise RuntimeError(f"request {request_id} has no audit entries to copy")
    return Template(dict(row), entries)


def _request_id(n: int) -> str:
    """``CR-H0000042``: distinct from the product's random ids (no ``H`` prefix there)."""
    return f"CR-H{n:07d}"


def _requester(n: int, people: tuple[str, ...]) -> str:
    """Mostly one of 500 others; every 100th request one of ``people`` (whose Home is read)."""
    if n % 100 == 0 and people:
        return people[(n // 100) % len(people)]
    return f"U0HIST{n % 500:04d}"


def _requests(
    template: Template, start: int, count: int, total: int, now: datetime, people: tuple[str, ...]
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Requests ``start`` … ``start + count`` of ``total``, with their audit entries."""
    step = YEAR / max(total, 1)
    first = now - YEAR - timedelta(minutes=5)
    projects = ("together-prod", "e2e-delhi")
    for n in range(start, start + count):
        created = first + step * n
        request = copy.copy(template.request)
        request_id = _request_id(n)
        project = projects[n % 7 == 0]  # one in seven at E2E
        request.update(
            id=request_id,
            created_at=created,
            updated_at=created + timedelta(minutes=2),
            state=_FINISHED[n % len(_FINISHED)],
            requester=_requester(n, people),
            channel=HISTORY_CHANNEL,
            project=project,
            cluster_id=f"hist-{n % 40:02d}",
            cluster_name=f"history-{n % 40:02d}",
            root_ts=None,
            summary_ts=None,
            prompt_ts=None,
            mirror_ts=None,
            last_transition=None,
            run_at=None,
            expires_at=None,
            follow_until=created + timedelta(minutes=32),  # followed for 30 min after it ran
            revert_of=None,
            revert_slot=None,
            step_id="",
        )
        entries = []
        for i, name in enumerate(_EVENTS):
            shape = template.entries[min(i, len(template.entries) - 1)]
            entries.append(
                {
                    "at": created + timedelta(minutes=i),
                    "actor": request["requester"],
                    "event": name,
                    "project": project,
                    "cluster_id": request["cluster_id"],
                    "request_id": request_id,
                    "outcome": shape.get("outcome"),
                    "detail": stored_detail(shape.get("detail") or {}),
                }
            )
        yield request, entries


async def preload(
    store: Store,
    template: Template,
    total: int,
    now: datetime,
    *,
    people: tuple[str, ...] = (),
) -> float:
    """Add ``total`` finished requests over the year before ``now`` (3 audit entries each,
    chained after the store's own); the seconds it took."""
    import time

    started = time.perf_counter()
    async with store._engine.begin() as conn:
        head = (
            (await conn.execute(select(audit_chain).where(audit_chain.c.name == CHAIN_NAME)))
            .mappings()
            .one()
        )
    entries_so_far, prev = int(head["entries"]), str(head["last_hash"] or GENESIS_HASH)
    async with store._engine.begin() as conn:
        last_id = (
            await conn.execute(select(audit.c.id).order_by(audit.c.id.desc()).limit(1))
        ).scalar()
    next_id = int(last_id or 0) + 1
    for start in range(0, total, BATCH):
        count = min(BATCH, total - start)
        requests: list[dict[str, Any]] = []
        chained: list[dict[str, Any]] = []
        for request, entries in _requests(template, start, count, total, now, people):
            requests.append(request)
            for entry in entries:
                entry["prev_hash"] = prev
                entry["hash"] = prev = entry_hash(entry, prev)
                entry["id"] = next_id
                next_id += 1
                chained.append(entry)
        async with store._engine.begin() as conn:
            await conn.execute(change_requests.insert(), requests)
            await conn.execute(audit.insert(), chained)
            entries_so_far += len(chained)
            await conn.execute(
                update(audit_chain)
                .where(audit_chain.c.name == CHAIN_NAME)
                .values(entries=entries_so_far, last_id=next_id - 1, last_hash=prev)
            )
    if total == 0:
        return time.perf_counter() - started
    if store._engine.dialect.name == "sqlite":
        async with store._engine.connect() as conn:
            await conn.exec_driver_sql("ANALYZE")
    else:
        async with store._engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            # The ids were given: the identity goes on after the last of them.
            await conn.exec_driver_sql(
                "SELECT setval(pg_get_serial_sequence('gpuops_audit', 'id'),"
                " (SELECT max(id) FROM gpuops_audit))"
            )
            await conn.exec_driver_sql("ANALYZE")
    return time.perf_counter() - started


def with_values(row: Mapping[str, Any], **values: Any) -> dict[str, Any]:
    """A copy of a template row with some columns changed."""
    copied = dict(row)
    copied.update(values)
    return copied
