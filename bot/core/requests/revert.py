"""Reverting a change (SPEC §9): its inverse as a new request, by the person who pressed.

The inverse was worked out just before the change was sent (``prior_values``); the new
request goes through the policy like any other, its root names the original, and the
original's thread names it. A cluster that no longer shows the change's result, a revert
already under way and a window that has passed are refused."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from bot.core.access import Refusal
from bot.core.answers import Notice, Reply
from bot.core.ask.change import ChangeAsk
from bot.core.notifier import RequestEvent
from bot.core.policy import Role
from bot.core.requests.deps import RequestDeps
from bot.core.requests.opening import Opening
from bot.core.requests.view import revertible, state_words
from bot.core.store import ChangeRequestRecord, RequestState, RevertTaken
from bot.core.store.migrations import REVERT_HELD_STATES
from bot.providers.base import ChangePlan, Inverse

# How request_change says it opened a request ("Request CR-… is waiting …" / "… ran").
_OPENED = re.compile(r"Request (CR-[0-9A-Z]+) ")
_DOING = "reverting a change"
_NOT_GRANTED = "you have no grant in gpuops — a gpuops admin can grant one in the policy."
# A revert in one of these states still counts: another one is refused meanwhile.
_LIVE = frozenset(RequestState(state) for state in REVERT_HELD_STATES)


class Reverts:
    """Turns a press of ``revert_request`` into the inverse change request."""

    def __init__(self, deps: RequestDeps, opening: Opening) -> None:
        self.deps = deps
        self.opening = opening

    async def revert(self, *, user: str, channel: str, request_id: str) -> Reply:
        """Grant first: someone who may not revert learns nothing of the request, and
        nothing is read from the provider for them."""
        deps = self.deps
        original: ChangeRequestRecord | None = None
        try:
            original = await self._granted(user, request_id)
            inverse = await self._inverse(original)
            reply = await self._open(user, original, inverse)
        except Refusal as refusal:
            project = original.project if original else None
            return await deps.access.refuse(
                user, channel, refusal, project=project, request_id=request_id
            )
        opened = _OPENED.match(reply.content.text) if isinstance(reply.content, Notice) else None
        if opened is not None:
            await self._tell_original(original, user, opened.group(1))
        return reply

    async def _granted(self, user: str, request_id: str) -> ChangeRequestRecord:
        """The request to revert, once ``user`` may request changes on its project; a
        Refusal that says nothing of it otherwise."""
        access = self.deps.access
        if not await access.authorizer.projects_granted(user, Role.viewer, anywhere=True):
            raise Refusal(_NOT_GRANTED, kind="not_authorized")
        original = await self.deps.store.get_request(request_id)
        if original is None:
            raise Refusal(f"there is no change request {request_id}.", kind="unknown_request")
        # In the request's own channel, as opening its inverse checks it (never the payload's).
        await access.require(user, original.project, original.channel, Role.operator, doing=_DOING)
        return original

    async def _open(self, user: str, original: ChangeRequestRecord, inverse: Inverse) -> Reply:
        """The inverse as a new request; a Refusal naming the revert another press opened
        meanwhile (the store lets one be under way or done per request)."""
        # The role was checked on the request's project in its channel (``_granted``).
        self.deps.access.require_cluster_allowed(original.project, original.cluster_id)
        ask = ChangeAsk(
            user=user,
            channel=original.channel,
            project=original.project,
            cluster_id=original.cluster_id,
            action=inverse.action,
            inputs=dict(inverse.inputs),
            reason=f"Revert of {original.id}",
            origin="revert",
            command=f"revert {original.id}",
            revert_of=original.id,
        )
        try:
            return await self.opening.request_change(ask)
        except RevertTaken:
            await self._refuse_if_reverted(original)
            raise Refusal(
                f"{original.id} already has a revert, opened just now.", kind="already_reverted"
            ) from None

    async def _inverse(self, original: ChangeRequestRecord) -> Inverse:
        """The inverse to request, or a Refusal saying why there is none now."""
        if not revertible(original):
            words = state_words(str(original.state))
            raise Refusal(f"{original.id} ({words}) has no revert.", kind="no_revert")
        await self._within_window(original)
        await self._refuse_if_reverted(original)
        state = await self.deps.access.fetch(original.project, original.cluster_id)
        plan = ChangePlan.model_validate(original.plan["plan"])
        if not self.deps.access.adapter_for(original.project).shows(plan, state):
            raise Refusal(
                f"stale: {original.cluster_id} no longer shows the result of {original.id} "
                f"({plan.preview_text()}); nothing to revert. Request a change instead.",
                kind="stale",
            )
        return Inverse.model_validate((original.prior_values or {})["inverse"])

    async def _refuse_if_reverted(self, original: ChangeRequestRecord) -> None:
        """A Refusal naming the revert of ``original`` under way or done, if there is one."""
        for earlier in await self.deps.store.list_reverts(original.id):
            if earlier.state in _LIVE:
                words = state_words(str(earlier.state))
                raise Refusal(
                    f"{original.id} already has a revert: {earlier.id} ({words}).",
                    kind="already_reverted",
                )

    async def _within_window(self, original: ChangeRequestRecord) -> None:
        hours = self.deps.policy.approvals.revert_window_hours
        done_at = await self._succeeded_at(original)
        if self.deps.clock() > done_at + timedelta(hours=hours):
            raise Refusal(
                f"{original.id} can be reverted for {hours:g} h after it was done; that "
                "time has passed. Request the change you need instead.",
                kind="revert_window",
            )

    async def _succeeded_at(self, original: ChangeRequestRecord) -> datetime:
        rows = await self.deps.store.list_audit(request_id=original.id, limit=50)
        done = (r.at for r in rows if r.event == "result" and r.outcome == "succeeded")
        return next(done, original.updated_at)

    async def _tell_original(self, original: ChangeRequestRecord, user: str, revert: str) -> None:
        """A note in the original's thread naming the revert."""
        text = f"<@{user}> asked to revert this change: request {revert}."
        event = RequestEvent("revert_requested", user, text)
        await self.deps.notifier.request_changed(original, event)
