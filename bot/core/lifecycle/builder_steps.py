"""The life of a Workflow Builder step (one function execution) as one table, and the only
code that writes a step's state.

Each ``Transition`` names the states it may come from (none: it stores a new execution) and
the one it goes to. ``TRANSITIONS`` is the whole lifecycle; the README draws it
(``mermaid()``), and a test checks the drawing, that every state is reached, that every open
one has a way out, that ``completed`` has none, and that no other module writes a state.

Every move is one statement (``bot.core.store.lifecycles``), whose WHERE or ON CONFLICT
clause is the compare-and-set: the database picks the one winner among replicas and
redeliveries. A step keeps no audit entry of its own (the request it made carries the
story), so there is no second write to keep with it. Each end is recorded (``completing``,
with what Slack is to be told) before Slack is told.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from bot.core.lifecycle import drawing
from bot.core.store.builder_steps import StepOutcome, StepRecord, StepState, StepStore
from bot.core.store.lifecycles import move_step, new_step

S = StepState


@dataclass(frozen=True)
class Transition:
    """One named step of a builder step's life. ``from_states`` empty: it stores a new
    execution."""

    name: str
    from_states: frozenset[StepState]
    to: StepState
    doc: str


def _t(name: str, from_states: Iterable[StepState], to: StepState, doc: str) -> Transition:
    return Transition(name, frozenset(from_states), to, doc)


CLAIM = _t("claim", (), S.RUNNING, "the one delivery of an execution that runs it")
REFUSE = _t(
    "refuse",
    (),
    S.COMPLETING,
    "never claimed (the store was down): recorded refused, with the error to tell",
)
BEGIN_COMPLETION = _t(
    "begin-completion",
    {S.RUNNING},
    S.COMPLETING,
    "its request ended, or it failed at once: what Slack is to be told, recorded first",
)
RETAKE = _t(
    "retake",
    {S.COMPLETING},
    S.COMPLETING,
    "a completion left unfinished (its replica died, Slack unreachable) is sent again",
)
COMPLETE = _t("complete", {S.COMPLETING}, S.COMPLETED, "Slack was told (or the execution was gone)")

TRANSITIONS: tuple[Transition, ...] = (CLAIM, REFUSE, BEGIN_COMPLETION, RETAKE, COMPLETE)
FINAL_STATES = frozenset({S.COMPLETED})


def mermaid() -> str:
    """The table as a ``stateDiagram-v2`` (the README's drawing)."""
    return drawing.mermaid(TRANSITIONS, [s for s in S if s in FINAL_STATES])


async def claim(steps: StepStore, execution_id: str, requester: str, channel: str) -> bool:
    """``claim``: True for the one caller (across replicas and redeliveries) that runs it."""
    claimed = await new_step(steps, execution_id, requester, channel, CLAIM.to)
    return claimed is not None


async def refuse(
    steps: StepStore, execution_id: str, requester: str, channel: str, payload: Mapping[str, object]
) -> StepRecord | None:
    """``refuse``: a step never claimed recorded as refused, ready to be completed with
    ``payload``; its completion for the one caller that wins, None when the execution is
    known already (claimed, refused or completed: whoever holds it ends it)."""
    return await new_step(
        steps,
        execution_id,
        requester,
        channel,
        REFUSE.to,
        outcome=StepOutcome.ERROR.value,
        payload=dict(payload),
    )


async def begin_completion(
    steps: StepStore, execution_id: str, outcome: StepOutcome, payload: Mapping[str, object]
) -> StepRecord | None:
    """``begin-completion``: a running step's completion claimed with what Slack is to be
    told; None when another caller completes (or completed) it."""
    t = BEGIN_COMPLETION
    return await move_step(
        steps, execution_id, t.from_states, t.to, outcome=outcome.value, payload=dict(payload)
    )


async def retake_completion(
    steps: StepStore, execution_id: str, before: datetime
) -> StepRecord | None:
    """``retake``: a completion left unfinished since before ``before`` taken over; the one
    caller that wins sends it again."""
    t = RETAKE
    return await move_step(steps, execution_id, t.from_states, t.to, updated_before=before)


async def completed(steps: StepStore, execution_id: str) -> None:
    """``complete``: the step is over."""
    await move_step(steps, execution_id, COMPLETE.from_states, COMPLETE.to)
