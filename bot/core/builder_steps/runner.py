"""Running a Workflow Builder step (SPEC §11): it asks for a change as a person's command
would, once per execution id, and a refusal or invalid input ends it at once with the answer
a person would have seen."""

from __future__ import annotations

import logging

from bot.core.answers import STORE_UNAVAILABLE_TEXT, Notice, Reply, error
from bot.core.ask.forms import FormRequest
from bot.core.builder_steps.completer import StepCompleter
from bot.core.builder_steps.start import StepStart, form_needs
from bot.core.lifecycle import builder_steps as lifecycle
from bot.core.service import CommandService
from bot.core.store import StepTaken, StoreUnavailable
from bot.core.store.builder_steps import StepStore
from bot.metrics import COMMANDS

log = logging.getLogger(__name__)

_STORE_DOWN_AT_START = (
    "gpuops could not reach its state store when this step started, so it made no request "
    "and nothing was changed. Run the step again if the change is still needed."
)
_STORE_LOST_BEFORE_REQUEST = (
    "gpuops lost contact with its state store before it could make this request, so "
    "nothing was changed. Run the step again if the change is still needed."
)


def _is_error(reply: Reply) -> bool:
    return isinstance(reply.content, Notice) and reply.content.error


def _for_later(reply: Reply) -> Reply:
    """An answer as it can be told once the store takes the step's end: "the store is
    unavailable" is then in the past (the core says it only where no request was made)."""
    content = reply.content
    if isinstance(content, Notice) and content.text == STORE_UNAVAILABLE_TEXT:
        return error(_STORE_LOST_BEFORE_REQUEST)
    return reply


class BuilderSteps:
    """Runs a step once per execution id: the request a command would make, or the step's
    end with the answer a person would have seen."""

    def __init__(self, ops: CommandService, steps: StepStore, completer: StepCompleter) -> None:
        self.ops = ops
        self.steps = steps
        self.completer = completer

    async def run(self, start: StepStart) -> None:
        try:
            claimed = await lifecycle.claim(
                self.steps, start.execution_id, start.requester, start.channel
            )
        except StoreUnavailable as exc:
            log.warning("refused workflow step %s: %s", start.execution_id, exc)
            await self.completer.refuse(start, error(_STORE_DOWN_AT_START))
            return
        if not claimed:
            log.info("ignored workflow step %s: it was started before", start.execution_id)
            return
        try:
            async with self.ops.pacer.turn():
                answer = await self._request(start)
        except StoreUnavailable as exc:
            log.warning("workflow step %s cut off by the store: %s", start.execution_id, exc)
            answer = error(_STORE_LOST_BEFORE_REQUEST)  # said only if no request was stored
        if answer is not None and _is_error(answer):
            await self.completer.end_unrequested(start.execution_id, _for_later(answer))

    async def give_up(self, execution_id: str, reply: Reply) -> None:
        """End a step that hit an unexpected error, unless it made its request (whose end
        ends it)."""
        await self.completer.end_unrequested(execution_id, reply)

    async def _request(self, start: StepStart) -> Reply | None:
        """Make the step's request; the answer when it made none (None: nothing to say)."""
        problem = start.problem()
        if problem is not None:
            COMMANDS.labels("step", "refused").inc()
            return error(problem)
        catalog = self.ops.access.catalog
        try:
            provider = catalog.descriptor(self.ops.access.provider_of(start.project))
        except KeyError:  # not in the policy: refused as any change of it is
            provider = catalog.descriptors[0]
        read = self.ops.reader.read_change(
            start.channel,
            provider.verb,
            start.project,
            start.cluster_id,
            start.change,
            start.reason,
        )
        if read.command is None:
            COMMANDS.labels("step", "refused").inc()
            return error(str(read.usage))
        try:
            outcome = await self.ops.handle_change(
                start.requester, start.channel, read, step=start.execution_id
            )
        except StepTaken:
            return None  # ended meanwhile (reconcile): no request was made
        if isinstance(outcome, FormRequest):
            required = [
                s.name
                for s in self.ops.forms.fields_of(outcome.project, outcome.action or "")
                if s.required and not outcome.prefill.get(s.name)
            ]
            return error(form_needs(outcome, required))
        return outcome
