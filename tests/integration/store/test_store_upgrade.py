"""A database made by an older gpuops is migrated in place on open, its rows kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import MetaData, Table, insert, text

import bot.core.store.migrations
from bot.core.store import (
    AuditRow,
    ClusterRef,
    OutcomeRecorded,
    RequestState,
    RevertTaken,
    StartedHow,
    Store,
    change_requests,
)
from bot.core.store.builder_steps import StepStore


async def test_a_v1_database_gains_the_prompt_column_and_keeps_its_requests(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patched:
        patched.setattr(
            bot.core.store.migrations, "MIGRATIONS", bot.core.store.migrations.MIGRATIONS[:1]
        )
        old = await Store.open(database_url)
        v1_table = Table(  # the table as version 1 made it: no prompt_ts
            change_requests.name,
            MetaData(),
            *(c._copy() for c in change_requests.columns if c.name != "prompt_ts"),
        )
        now = datetime.now(UTC)
        async with old.engine.begin() as conn:
            await conn.execute(
                insert(v1_table).values(
                    id="CR-OLD234",
                    created_at=now,
                    updated_at=now,
                    state="pending",
                    provider="e2e",
                    project="e2e-delhi",
                    cluster_id="101",
                    cluster_name="train",
                    action="restart_workers",
                    plan={"plan": {}},
                    kinds=["restart_workers"],
                    needs_approval=True,
                    requester="U04DAVE",
                    channel="C0INCIDENT",
                    reason="r",
                    break_glass=False,
                    expires_at=now + timedelta(minutes=30),
                    version=1,
                )
            )
        await old.close()

    store = await Store.open(database_url)
    try:
        kept = await store.get_request("CR-OLD234")
        assert kept is not None and kept.prompt_ts is None and kept.reason == "r"
        updated = await store.update_fields("CR-OLD234", prompt_ts="1700000000.000100")
        assert updated is not None and updated.prompt_ts == "1700000000.000100"
        async with store.engine.connect() as conn:
            versions = (
                (await conn.exec_driver_sql("SELECT version FROM gpuops_schema_version"))
                .scalars()
                .all()
            )
        assert sorted(versions) == [m.version for m in bot.core.store.migrations.MIGRATIONS]
    finally:
        await store.close()


async def test_a_v8_database_loses_the_step_tokens_it_kept(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patched:
        patched.setattr(
            bot.core.store.migrations, "MIGRATIONS", bot.core.store.migrations.MIGRATIONS[:8]
        )
        old = await Store.open(database_url)
        now = datetime.now(UTC)
        async with old.engine.begin() as conn:  # a waiting step as version 8 kept it
            await conn.execute(
                text(
                    "INSERT INTO gpuops_workflow_steps (execution_id, token, requester, "
                    "channel, request_id, state, created_at, updated_at) VALUES "
                    "('FxOLD', 'xwfp-1-kept-in-clear', 'U04DAVE', 'C0INCIDENT', 'CR-OLD234', "
                    "'running', :now, :now)"
                ),
                {"now": now},
            )
        await old.close()

    store = await Store.open(database_url)
    try:
        async with store.engine.connect() as conn:
            every_column = text("SELECT * FROM gpuops_workflow_steps")
            rows = [dict(r) for r in (await conn.execute(every_column)).mappings().all()]
        assert [r["execution_id"] for r in rows] == ["FxOLD"]
        assert "token" not in rows[0] and "xwfp-1-kept-in-clear" not in str(rows[0])
        step = await StepStore(store).get("FxOLD")
        assert step is not None and step.request_id == "CR-OLD234"  # still completed later
    finally:
        await store.close()


_V10_REQUEST = (
    "INSERT INTO gpuops_change_requests (id, created_at, updated_at, state, provider, project,"
    " cluster_id, cluster_name, action, plan, kinds, needs_approval, requester, channel,"
    " break_glass, version, step_id) VALUES (:id, :now, :now, :state, 'together', 'prod',"
    " :cluster, 'train', 'update', '{}', '[]', false, 'U1', 'C1', false, 1, '')"
)


async def test_a_change_under_way_across_migration_11_ends_in_one_statement(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 10 left a change executing (its lease and lock held) and another approved;
    after migration 11 the one finishes and the other starts as the new release does it,
    freeing and taking what version 10 wrote, with the audit chain intact."""
    with monkeypatch.context() as patched:
        patched.setattr(
            bot.core.store.migrations, "MIGRATIONS", bot.core.store.migrations.MIGRATIONS[:10]
        )
        old = await Store.open(database_url)
        now = datetime.now(UTC)
        async with old.engine.begin() as conn:
            for request_id, state, cluster in (
                ("CR-RUN234", "executing", "c-1"),
                ("CR-NEXT23", "approved", "c-2"),
            ):
                params = {"id": request_id, "now": now, "state": state, "cluster": cluster}
                await conn.execute(text(_V10_REQUEST), params)
        assert await old.lock_cluster(
            "together", "prod", "c-1", "CR-RUN234", lease_name="exec:CR-RUN234"
        )
        await old.close()

    store = await Store.open(database_url)
    try:
        lease = await store.take_lease("exec:CR-RUN234", "replica-a", 60)
        assert lease is not None
        ended = ClusterRef(provider="together", project="prod", cluster_id="c-1")
        status, done = await store.finish_execution(
            "CR-RUN234",
            lease,
            to=RequestState.SUCCEEDED,
            result_message="done",
            cluster=ended,
            audit=AuditRow(actor="U1", event="result", request_id="CR-RUN234"),
        )
        assert status is OutcomeRecorded.RECORDED and done is not None
        assert await store.cluster_holder("together", "prod", "c-1") is None
        assert await store.get_lease("exec:CR-RUN234") is None
        started = await store.start_execution(
            "CR-NEXT23",
            lease_name="exec:CR-NEXT23",
            holder="replica-a",
            ttl_seconds=60,
            cluster=ended.model_copy(update={"cluster_id": "c-2"}),
            max_call_seconds=60,
            audit=AuditRow(actor="U1", event="executing", request_id="CR-NEXT23"),
        )
        assert started.how is StartedHow.STARTED
        assert await store.cluster_holder("together", "prod", "c-2") == "CR-NEXT23"
        assert [e.event for e in await store.list_audit()] == ["executing", "result"]
        _, broken = await store.verify_audit()
        assert broken is None
    finally:
        await store.close()


_V11_REVERT = (
    "INSERT INTO gpuops_change_requests (id, created_at, updated_at, state, provider, project,"
    " cluster_id, cluster_name, action, plan, kinds, needs_approval, requester, channel,"
    " break_glass, version, step_id, revert_of) VALUES (:id, :at, :at, :state, 'together',"
    " 'prod', 'c-1', 'train', 'update', '{}', '[]', true, 'U1', 'C1', false, 1, '', :of)"
)


async def test_reverts_doubled_before_migration_12_keep_the_oldest_in_the_slot(
    database_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Version 11 let two reverts of one request be pending at once: the upgrade keeps
    both, the older holds the request's one revert slot, the other is logged to cancel;
    a third is then refused by the store."""
    before = tuple(m for m in bot.core.store.migrations.MIGRATIONS if m.version < 12)
    with monkeypatch.context() as patched:
        patched.setattr(bot.core.store.migrations, "MIGRATIONS", before)
        old = await Store.open(database_url)
        now = datetime.now(UTC)
        async with old.engine.begin() as conn:
            for request_id, state, of, minutes in (
                ("CR-ORIG234", "succeeded", None, 0),
                ("CR-GONE234", "cancelled", "CR-ORIG234", 1),
                ("CR-REV1234", "pending", "CR-ORIG234", 2),
                ("CR-REV2234", "pending", "CR-ORIG234", 3),
            ):
                at = now + timedelta(minutes=minutes)
                params = {"id": request_id, "at": at, "state": state, "of": of}
                await conn.execute(text(_V11_REVERT), params)
        await old.close()

    with caplog.at_level("WARNING", logger="bot.core.store.migrations"):
        store = await Store.open(database_url)
    try:
        assert "request CR-REV2234 is a second revert of CR-ORIG234: cancel it" in caplog.text
        async with store.engine.connect() as conn:
            slots = text("SELECT id, revert_slot FROM gpuops_change_requests ORDER BY id")
            held = {row.id: row.revert_slot for row in await conn.execute(slots)}
        assert held == {
            "CR-GONE234": "CR-ORIG234",
            "CR-ORIG234": None,
            "CR-REV1234": "CR-ORIG234",
            "CR-REV2234": None,
        }
        with pytest.raises(RevertTaken):
            await store.open_request(
                provider="together",
                project="prod",
                cluster_id="c-1",
                cluster_name="train",
                action="update",
                plan={"plan": {}},
                kinds=["update"],
                needs_approval=True,
                requester="U1",
                channel="C1",
                reason="Revert of CR-ORIG234",
                expires_at=None,
                revert_of="CR-ORIG234",
            )
        assert len(await store.list_reverts("CR-ORIG234")) == 3
    finally:
        await store.close()
