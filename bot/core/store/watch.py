"""The watcher's durable state: alert keys (what was posted, where) and the remediations
gpuops posted, with the compare-and-set that lets exactly one click decide each.

Like the change requests in ``db``, every deciding write is one statement whose WHERE or
ON CONFLICT clause is the decision, so the database picks the one winner among replicas
and double clicks.

An alert key is claimed before its message is posted and its ``ts`` written after, so a
claim without a ts is a post under way, or one that never happened: its claimer died, or
its claim's commit reached the database but the answer never came back. Such a claim is
taken over once it is older than ``claim_takeover`` (one statement: ``ON CONFLICT DO UPDATE
… WHERE ts IS NULL AND posted_at < cutoff``, so one poller wins even across replicas), and
every write after the post names the claim it holds (its ``posted_at``), so a poster whose
claim was taken over writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, Delete, delete, select, update
from sqlalchemy.sql.dml import ReturningInsert, ReturningUpdate

from bot.core.store.db import Store
from bot.core.store.engine import Upsert
from bot.core.store.records import REQUEST_ID_PREFIX, new_request_id
from bot.core.store.tables import change_requests
from bot.core.store.watch_records import REMEDIATION_ID_PREFIX as REMEDIATION_ID_PREFIX
from bot.core.store.watch_records import AlertClaim as AlertClaim
from bot.core.store.watch_records import Held as Held
from bot.core.store.watch_records import NewRemediationRecord as NewRemediationRecord
from bot.core.store.watch_records import RemediationDecision as RemediationDecision
from bot.core.store.watch_records import RemediationRecord as RemediationRecord
from bot.core.store.watch_records import alerts as alerts
from bot.core.store.watch_records import memory as memory
from bot.core.store.watch_records import remediations as remediations

# A claim never posted is taken over after this long: well above a post's own time (Slack
# calls time out after 10 s, three tries at most, plus any Retry-After waits between).
CLAIM_TAKEOVER = timedelta(minutes=5)

log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


def _log_taken_over(claim: AlertClaim, ts: str) -> None:
    log.error(
        "alert %s was taken over by another poll while this one posted it (message %s): "
        "it may be in the channel twice",
        claim.key,
        ts,
    )


class WatchStore:
    """The watcher's tables in the gpuops database (shares the Store's engine and lock)."""

    def __init__(self, store: Store, *, claim_takeover: timedelta = CLAIM_TAKEOVER) -> None:
        self.store = store
        self.claim_takeover = claim_takeover

    # ---- alert keys -------------------------------------------------------------------

    def _claim(self, key: str, channel: str, now: datetime) -> ReturningInsert[tuple[str]]:
        """Insert a new claim, or take over one never posted and older than the bound."""
        insert = self.store._insert(alerts).values(key=key, channel=channel, posted_at=now)
        return insert.on_conflict_do_update(
            index_elements=[alerts.c.key],
            set_={"posted_at": insert.excluded.posted_at},
            where=alerts.c.ts.is_(None) & (alerts.c.posted_at < now - self.claim_takeover),
        ).returning(alerts.c.key)

    async def claim_alert(self, key: str, channel: str) -> AlertClaim | Held:
        """The claim for the one caller (across replicas, restarts) that may post ``key``
        now; else why not."""
        now = _now()
        async with self.store._begin() as conn:
            if (await conn.execute(self._claim(key, channel, now))).first() is not None:
                return AlertClaim(key, now)
            held = select(alerts.c.ts).where(alerts.c.key == key)
            row = (await conn.execute(held)).first()
        return Held.PENDING if row is not None and row[0] is None else Held.POSTED

    async def alert_posted(self, claim: AlertClaim, ts: str) -> None:
        """Remember where the message of a claimed key is (to edit it or reply under it).
        A claim taken over meanwhile is left to its new claimer, and logged: a post that
        outlived the takeover bound, so the alert may be in the channel twice."""
        async with self.store._begin() as conn:
            written = (await conn.execute(self._posted(claim, ts))).first() is not None
        if not written:
            _log_taken_over(claim, ts)

    def _posted(self, claim: AlertClaim, ts: str) -> ReturningUpdate[tuple[str]]:
        return (
            update(alerts)
            .where(alerts.c.key == claim.key, alerts.c.posted_at == claim.at)
            .where(alerts.c.ts.is_(None))
            .values(ts=ts)
            .returning(alerts.c.key)
        )

    async def forget_alert(self, claim: AlertClaim) -> None:
        """Give a claim up because its post failed (the next poll tries again); a claim
        taken over meanwhile is the new claimer's, and stays."""
        async with self.store._begin() as conn:
            await conn.execute(self._forget(claim))

    @staticmethod
    def _forget(claim: AlertClaim) -> Delete:
        return delete(alerts).where(
            alerts.c.key == claim.key, alerts.c.posted_at == claim.at, alerts.c.ts.is_(None)
        )

    async def claimed(self, keys: Collection[str]) -> frozenset[str]:
        """Which of ``keys`` were posted (or deliberately skipped) already, or are claimed
        and may be being posted: one query. A claim past the takeover bound and never
        posted is not among them (the next claim takes it over)."""
        if not keys:
            return frozenset()
        cutoff = _now() - self.claim_takeover
        statement = select(alerts.c.key).where(
            alerts.c.key.in_(list(keys)),
            alerts.c.ts.is_not(None) | (alerts.c.posted_at >= cutoff),
        )
        async with self.store._begin() as conn:
            rows = (await conn.execute(statement)).scalars().all()
        return frozenset(rows)

    async def alert_ts(self, key: str) -> str | None:
        async with self.store._begin() as conn:
            row = (await conn.execute(select(alerts.c.ts).where(alerts.c.key == key))).first()
        return None if row is None else row[0]

    # ---- memory between polls ---------------------------------------------------------

    async def recall(self, name: str) -> dict[str, object]:
        """What was remembered under ``name`` (empty if nothing)."""
        statement = select(memory.c.data).where(memory.c.name == name)
        async with self.store._begin() as conn:
            row = (await conn.execute(statement)).first()
        return dict(row[0]) if row is not None and isinstance(row[0], dict) else {}

    async def remember(self, name: str, data: Mapping[str, object]) -> None:
        insert = self.store._insert(memory).values(name=name, data=data, updated_at=_now())
        statement = insert.on_conflict_do_update(
            index_elements=[memory.c.name],
            set_={"data": insert.excluded.data, "updated_at": insert.excluded.updated_at},
        )
        async with self.store._begin() as conn:
            await conn.execute(statement)

    # ---- gpuops's own changes ----------------------------------------------------------

    async def clusters_changed_since(
        self, project: str, since: datetime, states: Collection[str]
    ) -> frozenset[str]:
        """Clusters of the project with a change request in ``states`` updated since then."""
        statement = (
            select(change_requests.c.cluster_id)
            .where(
                change_requests.c.project == project,
                change_requests.c.state.in_(list(states)),
                change_requests.c.updated_at >= since,
            )
            .distinct()
        )
        async with self.store._begin() as conn:
            rows = (await conn.execute(statement)).scalars().all()
        return frozenset(rows)

    # ---- remediations -----------------------------------------------------------------

    def _new_remediation(self, new: NewRemediationRecord) -> Upsert:
        """Store a newly seen remediation (returning it), unless it is stored already."""
        now = _now()
        return (
            self.store._insert(remediations)
            .values(
                id=REMEDIATION_ID_PREFIX + new_request_id().removeprefix(REQUEST_ID_PREFIX),
                decision=RemediationDecision.AWAITING.value,
                created_at=now,
                updated_at=now,
                version=1,
                **new.model_dump(),
            )
            .on_conflict_do_nothing(
                index_elements=[remediations.c.project, remediations.c.remediation_id]
            )
            .returning(*remediations.c)
        )

    async def claim_remediation(
        self, key: str, new: NewRemediationRecord
    ) -> tuple[AlertClaim, RemediationRecord] | None:
        """Claim a remediation's alert key (new, or taken over: see ``claim_alert``) and
        store its record in one transaction (both or neither): the claim and the record to
        post, or None when it is held. A record left by an older gpuops whose claim was
        given back, or by a claimer that never posted, is returned while it was never
        posted."""
        now = _now()
        existing = select(remediations).where(
            remediations.c.project == new.project,
            remediations.c.remediation_id == new.remediation_id,
        )
        async with self.store._begin() as conn:
            if (await conn.execute(self._claim(key, new.channel, now))).first() is None:
                return None
            row = (await conn.execute(self._new_remediation(new))).mappings().first()
            if row is None:
                row = (await conn.execute(existing)).mappings().first()
        if row is None:
            return None
        record = RemediationRecord.model_validate(dict(row))
        return (AlertClaim(key, now), record) if record.ts is None else None

    async def give_up_remediation(self, claim: AlertClaim, record_id: str) -> None:
        """Its post failed: the alert key and the record go back together (the next poll
        posts it afresh), unless the claim was taken over meanwhile."""
        async with self.store._begin() as conn:
            if (await conn.execute(self._forget(claim))).rowcount:
                await conn.execute(
                    delete(remediations).where(
                        remediations.c.id == record_id, remediations.c.ts.is_(None)
                    )
                )

    async def remediation_posted(self, claim: AlertClaim, record_id: str, ts: str) -> None:
        """Where a remediation's message is, on its alert key and its record at once; a
        claim taken over meanwhile writes nothing (as ``alert_posted``)."""
        async with self.store._begin() as conn:
            if (await conn.execute(self._posted(claim, ts))).first() is None:
                _log_taken_over(claim, ts)
                return
            await conn.execute(
                update(remediations)
                .where(remediations.c.id == record_id)
                .values(ts=ts, updated_at=_now(), version=remediations.c.version + 1)
            )

    async def get_remediation(self, record_id: str) -> RemediationRecord | None:
        statement = select(remediations).where(remediations.c.id == record_id)
        async with self.store._begin() as conn:
            row = (await conn.execute(statement)).mappings().first()
        return None if row is None else RemediationRecord.model_validate(dict(row))

    async def followed_remediations(
        self, project: str, finished_states: Collection[str]
    ) -> list[RemediationRecord]:
        """The project's posted remediations whose provider state is not final yet."""
        statement = (
            select(remediations)
            .where(
                remediations.c.project == project,
                remediations.c.provider_state.not_in(list(finished_states)),
            )
            .order_by(remediations.c.created_at)
        )
        async with self.store._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [RemediationRecord.model_validate(dict(row)) for row in rows]

    async def decide_remediation(
        self,
        record_id: str,
        *,
        from_decisions: Collection[RemediationDecision],
        to: RemediationDecision,
        **fields: object,
    ) -> RemediationRecord | None:
        """Compare-and-set: move the decision if it is still one of ``from_decisions``;
        the new record for the one winner, None for everyone else."""
        return await self._update(
            record_id,
            remediations.c.decision.in_([d.value for d in from_decisions]),
            decision=to.value,
            **fields,
        )

    async def set_remediation(self, record_id: str, **fields: object) -> RemediationRecord | None:
        """Record facts (message ts, provider state) without deciding anything."""
        return await self._update(record_id, None, **fields)

    async def _update(
        self, record_id: str, condition: ColumnElement[bool] | None, **fields: object
    ) -> RemediationRecord | None:
        allowed = {"ts", "provider_state", "decided_by", "comment", "decision"}
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"cannot set {', '.join(sorted(unknown))} on a remediation")
        statement = update(remediations).where(remediations.c.id == record_id)
        if condition is not None:
            statement = statement.where(condition)
        statement = statement.values(
            updated_at=_now(), version=remediations.c.version + 1, **fields
        ).returning(*remediations.c)
        async with self.store._begin() as conn:
            row = (await conn.execute(statement)).mappings().first()
        return None if row is None else RemediationRecord.model_validate(dict(row))

    # ---- signals on a cluster (a staged plan's soak, SPEC §14) ------------------------

    async def signals_since(
        self, project: str, cluster_id: str, alert_prefix: str, since: datetime
    ) -> list[str]:
        """What the watcher raised on a cluster since ``since``: each remediation it posted
        (its node) and each health alert (its key, under ``alert_prefix``), oldest first."""
        found = (
            select(remediations.c.node, remediations.c.created_at)
            .where(
                remediations.c.project == project,
                remediations.c.cluster_id == cluster_id,
                remediations.c.created_at >= since,
            )
            .order_by(remediations.c.created_at)
        )
        raised = (
            select(alerts.c.key, alerts.c.posted_at)
            .where(alerts.c.key.startswith(alert_prefix, autoescape=True))
            .where(alerts.c.posted_at >= since)
            .order_by(alerts.c.posted_at)
        )
        async with self.store._begin() as conn:
            nodes = (await conn.execute(found)).all()
            keys = (await conn.execute(raised)).all()
        said = [(at, f"a remediation on node {node}") for node, at in nodes]
        said += [(at, "a health alert") for key, at in keys if not key.endswith(":recovered")]
        return [text for _, text in sorted(said)]
