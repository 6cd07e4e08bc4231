"""Deciding a posted node remediation (SPEC §7.1): one approver's click, sent at most once.

The click that moves the stored record from ``awaiting`` to ``deciding`` (compare-and-set) is
the only one that calls the provider; approve and reject are never retried once they may have
been processed. Every word about the provider is its descriptor's title."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from bot.core.access import Access, Refusal
from bot.core.answers import Notice, Reply, error, notice, store_unavailable
from bot.core.lifecycle import remediations as lifecycle
from bot.core.lifecycle.remediations import Move
from bot.core.policy import Role
from bot.core.store import StoreUnavailable
from bot.core.store.watch import RemediationDecision, RemediationRecord, WatchStore
from bot.core.watch.backlog import StoreBacklog
from bot.core.watch.notifier import DecisionOutcome, WatchNotifier
from bot.metrics import REMEDIATION_DECISIONS
from bot.providers.base import RemediationDecisions
from bot.providers.errors import AlreadyDecided, ProviderError
from bot.providers.remediations import Remediation, RemediationRef

log = logging.getLogger(__name__)

Verb = Literal["approve", "reject"]
RemediationsFor = Callable[[str], RemediationDecisions]

_DONE: dict[Verb, tuple[RemediationDecision, DecisionOutcome, str]] = {
    "approve": (RemediationDecision.APPROVED, "approved", "Approved"),
    "reject": (RemediationDecision.REJECTED, "rejected", "Rejected"),
}
_DOING: dict[Verb, str] = {"approve": "approving", "reject": "rejecting"}
_KEPT = "gpuops lost contact with its database meanwhile; the decision is recorded once it is back."
_UNKNOWN = error("I do not know that remediation (was it posted by another gpuops?).")


class RemediationClicks:
    """An approver's approve or reject of a posted remediation, sent to its provider once."""

    def __init__(
        self,
        *,
        access: Access,
        store: WatchStore,
        notifier: WatchNotifier,
        remediations_for: RemediationsFor,
        backlog: StoreBacklog,
    ) -> None:
        self.access = access
        self.store = store
        self.notifier = notifier
        self.remediations_for = remediations_for
        self.backlog = backlog

    def _title(self, project: str) -> str:
        """How people name the project's provider (its descriptor's title)."""
        return self.access.policy.provider_title(project)

    async def may_decide(
        self, *, user: str, channel: str, record_id: str, verb: Verb
    ) -> Reply | None:
        """None if ``user`` may decide it here (and it still awaits a decision); else the
        refusal (audited) to show them — before a reject form is opened for nothing."""
        try:
            record = await self._decidable(user, channel, record_id, verb)
            if isinstance(record, Reply):
                return record
            if record.decision is not RemediationDecision.AWAITING:
                return await self._lost(user, record, verb)
        except StoreUnavailable as exc:
            log.warning("refused a remediation %s: %s", verb, exc)
            return store_unavailable()
        return None

    async def decide(
        self, *, user: str, channel: str, record_id: str, verb: Verb, comment: str | None = None
    ) -> Reply:
        """One click on approve or reject; the answer is for the person who clicked. With
        the store unavailable before the click won, nothing is sent (and it says so)."""
        try:
            won = await self._win(user, channel, record_id, verb, comment)
        except StoreUnavailable as exc:
            log.warning("refused a remediation %s: %s", verb, exc)
            return store_unavailable()
        if isinstance(won, Reply):
            return won
        return await self._send(user, won, verb, comment)

    async def _win(
        self, user: str, channel: str, record_id: str, verb: Verb, comment: str | None
    ) -> RemediationRecord | Reply:
        """The record if this click won the decision (compare-and-set, audited as being
        sent), else the answer."""
        record = await self._decidable(user, channel, record_id, verb)
        if isinstance(record, Reply):
            return record
        click = Move(
            lifecycle.CLICK,
            user,
            "sending",
            verb=verb,
            fields={"decided_by": user, "comment": comment},
            detail=_click_detail(record),
        )
        won = await lifecycle.apply(self.store, record, click)
        if won is None:
            return await self._lost(user, record, verb)
        return won

    async def _decidable(
        self, user: str, channel: str, record_id: str, verb: Verb
    ) -> RemediationRecord | Reply:
        """The record if it exists and ``user`` may decide it; else the answer."""
        record = await self.store.get_remediation(record_id)
        if record is None:
            return _UNKNOWN
        refusal = await self._refusal(user, channel, record, verb)
        return record if refusal is None else refusal

    async def _refusal(
        self, user: str, channel: str, record: RemediationRecord, verb: Verb
    ) -> Reply | None:
        """Checked in the channel the remediation was posted to, never the payload's
        (``channel``, where the click came from, is audited)."""
        try:
            await self.access.require(
                user,
                record.project,
                record.channel,
                Role.approver,
                doing=f"{_DOING[verb]} a remediation",
            )
        except Refusal as refusal:
            REMEDIATION_DECISIONS.labels("refused").inc()
            return await self.access.refuse(
                user,
                channel,
                refusal,
                project=record.project,
                cluster_id=record.cluster_id,
                command=f"{verb}_remediation {record.remediation_id}",
            )
        return None

    async def _lost(self, user: str, record: RemediationRecord, verb: Verb) -> Reply:
        latest = await self.store.get_remediation(record.id) or record
        await self._audit_click(user, latest, verb, "too_late")
        by = f" by <@{latest.decided_by}>" if latest.decided_by else ""
        text = f"This remediation is no longer awaiting a decision ({latest.decision}{by})."
        mentions = (latest.decided_by,) if latest.decided_by else ()
        return Reply(Notice(text, mentions=mentions))

    async def _send(
        self, user: str, record: RemediationRecord, verb: Verb, comment: str | None
    ) -> Reply:
        client = self.remediations_for(record.project)
        ref = RemediationRef(record.remediation_id, record.cluster_id, record.instance_id)
        provider = self._title(record.project)
        try:
            if verb == "approve":
                result = await client.approve(ref, comment=comment)
            else:
                result = await client.reject(ref, comment=comment)
        except AlreadyDecided:
            ending = _Ending(
                RemediationDecision.ALREADY_DECIDED,
                "already_decided",
                f"Already decided at {provider}: someone decided it first.",
            )
        except ProviderError as exc:
            ending = _failure(exc, provider)
        else:
            decision, outcome, done = _DONE[verb]
            said = f"{done}; {provider} says {result.state}."
            ending = _Ending(decision, outcome, said, result.state, result)
        if ending.remediation is None and ending.decision is not RemediationDecision.AWAITING:
            ending = replace(ending, remediation=await self._read_quietly(client, ref))
        return await self._finish(user, record, verb, ending)

    @staticmethod
    async def _read_quietly(
        client: RemediationDecisions, ref: RemediationRef
    ) -> Remediation | None:
        """The remediation as Together has it now, for its message to keep saying why; None
        when Together does not answer (the message then shows the outcome alone)."""
        try:
            return await client.get(ref.cluster_id, ref.instance_id, ref.id)
        except ProviderError:
            return None

    async def _finish(
        self, user: str, record: RemediationRecord, verb: Verb, ending: _Ending
    ) -> Reply:
        fields: dict[str, str | None] = {}
        if ending.provider_state is not None:
            fields["provider_state"] = ending.provider_state
        if ending.decision is RemediationDecision.AWAITING:
            fields.update(decided_by=None, comment=None)
        text = ending.text
        move = Move(
            lifecycle.sent(ending.decision),
            user,
            ending.outcome,
            verb=verb,
            fields=fields,
            detail=_click_detail(record, text),
        )
        try:
            final = await lifecycle.apply(self.store, record, move)
        except StoreUnavailable as exc:
            # Sent (or refused) already: said as it is, and recorded once the store is back.
            log.warning("remediation %s: its decision kept for the store: %s", record.id, exc)
            text += " " + _KEPT
            kept = replace(move, detail=_click_detail(record, text))
            self.backlog.keep(
                f"recording the decision on remediation {record.remediation_id}",
                functools.partial(self._record_decision, record, kept),
            )
            final = record.model_copy(update={"decision": ending.decision, **fields})
        else:
            if final is None:  # moved meanwhile: what the call did is audited still
                await self._audit_click(user, record, verb, ending.outcome, detail=text)
        REMEDIATION_DECISIONS.labels(ending.outcome).inc()
        await self.notifier.remediation_decided(
            final or record, ending.outcome, text, ending.remediation
        )
        if ending.outcome in ("failed", "unknown"):
            return error(text)
        return notice(text)

    async def _record_decision(self, record: RemediationRecord, move: Move) -> None:
        await lifecycle.apply(self.store, record, move)

    async def _audit_click(
        self,
        user: str,
        record: RemediationRecord,
        verb: Verb,
        outcome: str,
        *,
        detail: str = "",
    ) -> None:
        audit = functools.partial(
            self.access.audit,
            user,
            f"remediation_{verb}",
            project=record.project,
            cluster_id=record.cluster_id,
            outcome=outcome,
            **_click_detail(record, detail),
        )
        await self.backlog.attempt(f"auditing a {verb} of {record.remediation_id}", audit)


def _click_detail(record: RemediationRecord, detail: str = "") -> dict[str, str]:
    """What a click's audit entry says of the remediation (``detail``: what it was told)."""
    return {
        "remediation": record.remediation_id,
        "node": record.node,
        "record": record.id,
        "detail": detail,
    }


@dataclass(frozen=True)
class _Ending:
    decision: RemediationDecision
    outcome: DecisionOutcome
    text: str
    provider_state: str | None = None
    remediation: Remediation | None = None  # as Together last said: the message keeps "why"


def _failure(exc: ProviderError, provider: str) -> _Ending:
    if exc.may_have_applied:
        return _Ending(
            RemediationDecision.UNKNOWN,
            "unknown",
            f"{provider} may or may not have taken it ({exc.user_message}); it is not sent "
            f"again, and its thread will follow what {provider} reports.",
        )
    return _Ending(
        RemediationDecision.AWAITING,
        "failed",
        f"{provider} did not take it: {exc.user_message}. The buttons are back; try again.",
    )
