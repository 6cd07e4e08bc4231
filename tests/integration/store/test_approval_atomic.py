"""An approval is one transaction (issue 35): the approver added, the state's compare-and-set
and its audit entry are written together or not at all, on SQLite and PostgreSQL. They are
one statement on both (the row's write, whose trigger or WITH chain appends the entry); a
crash injected inside the transaction, before that write or after it (entry appended, not
committed), leaves the request as it was and no entry; without one, all three are there."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.core.store import AuditRow, ChangeRequestRecord, RequestState, Store

S = RequestState
TWO = {"needs": 2}


class Crash(Exception):
    """The process dies mid-transaction (the transaction is never committed)."""


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(database_url)
    yield opened
    await opened.close()


async def pending(store: Store) -> ChangeRequestRecord:
    opened, _ = await store.open_request(
        provider="together",
        project="prod",
        cluster_id="c-1",
        cluster_name="train",
        action="update",
        plan={"num_gpus": 16},
        kinds=["scale"],
        needs_approval=True,
        requester="U1",
        channel="C1",
        reason=None,
        expires_at=None,
        audit=AuditRow(actor="U1", event="requested", outcome="pending"),
    )
    return opened


async def approve(
    store: Store, seen: ChangeRequestRecord, to: RequestState
) -> ChangeRequestRecord | None:
    event = "approved" if to is S.APPROVED else "approval_added"
    fields = {"decided_by": "U2"} if to is S.APPROVED else {}
    return await store.decide_approval(
        seen, "U2", TWO, to=to, audit=AuditRow(actor="U2", event=event), **fields
    )


Move = Callable[..., Awaitable[ChangeRequestRecord | None]]


def crashing(real: Move, *, after_append: bool) -> Move:
    """The store's one write of a transition (``_move_in``: the row and its audit entry),
    with the process dying just before it or just after it, in its transaction."""

    async def move(conn: AsyncConnection, *args: Any, **kwargs: Any) -> ChangeRequestRecord:
        if after_append:
            await real(conn, *args, **kwargs)
        raise Crash(f"died {'after' if after_append else 'before'} the audit entry")

    return move


async def events(store: Store, request_id: str) -> list[str]:
    return sorted(entry.event for entry in await store.list_audit(request_id=request_id))


@pytest.mark.parametrize("after_append", [False, True], ids=["before-audit", "after-audit"])
@pytest.mark.parametrize("to", [S.PENDING, S.APPROVED], ids=["partial", "last"])
async def test_a_crash_inside_an_approval_leaves_neither_approver_state_nor_audit(
    store: Store, monkeypatch: pytest.MonkeyPatch, to: RequestState, after_append: bool
) -> None:
    record = await pending(store)
    monkeypatch.setattr(store, "_move_in", crashing(store._move_in, after_append=after_append))
    with pytest.raises(Crash):
        await approve(store, record, to)
    monkeypatch.undo()
    after = await store.get_request(record.id)
    assert after is not None
    assert (after.state, after.approvers, after.version) == (S.PENDING, [], record.version)
    assert after.decided_by is None
    assert await events(store, record.id) == ["requested"]
    _, broken = await store.verify_audit()
    assert broken is None
    # Pressed again, it is taken whole: the approver, the state and the entry together.
    done = await approve(store, record, to)
    assert done is not None and done.state is to and done.approvers == ["U2"]
    expected = "approved" if to is S.APPROVED else "approval_added"
    assert await events(store, record.id) == sorted(["requested", expected])


async def test_an_approval_of_a_request_that_moved_writes_nothing(store: Store) -> None:
    record = await pending(store)
    assert await approve(store, record, S.PENDING) is not None
    assert await approve(store, record, S.APPROVED) is None  # seen at the older version
    after = await store.get_request(record.id)
    assert after is not None and after.state is S.PENDING and after.approvers == ["U2"]
    assert await events(store, record.id) == ["approval_added", "requested"]
