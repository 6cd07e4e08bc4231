"""The staged plan's table (bot.core.lifecycle.plans): the plan's and a step's states each
reached, every open one with a way out and ended ones none, unique names, the README draws
both, and no module outside the table writes a plan's or a step's state."""

from __future__ import annotations

import re
from pathlib import Path

from bot.core.lifecycle import plans
from bot.core.store.plans import PlanState, StagedStepState

ROOT = Path(__file__).resolve().parents[2]


def _reached(rows: list[plans._Row]) -> set[object]:
    reached: set[object] = set()
    frontier: set[object] = {r.to for r in rows if not r.from_states}
    while frontier:
        reached |= frontier
        frontier = {r.to for r in rows if r.from_states & reached and r.to is not None}
        frontier -= reached
    return reached


def test_every_state_is_reached() -> None:
    assert _reached(plans.plan_rows()) == set(PlanState)
    assert _reached(plans.step_rows()) == set(StagedStepState)


def test_every_open_state_has_a_way_out_and_ended_ones_none() -> None:
    for rows, states, finals in (
        (plans.plan_rows(), PlanState, plans.FINAL_PLAN_STATES),
        (plans.step_rows(), StagedStepState, plans.FINAL_STEP_STATES),
    ):
        for state in states:
            out = [r for r in rows if state in r.from_states and r.to not in (None, state)]
            assert bool(out) is (state not in finals), state


def test_names_and_audit_events_are_unique() -> None:
    names = [t.name for t in plans.TRANSITIONS]
    assert len(names) == len(set(names))
    assert all(t.audit_event.startswith("plan_") for t in plans.TRANSITIONS)


def test_a_send_needs_a_running_plan_and_a_pending_step() -> None:
    assert plans.SEND.plan_from == {PlanState.RUNNING}
    assert plans.SEND.step_from == {StagedStepState.PENDING}
    # Nothing moves a step back to sending: a step's call goes once.
    assert [t for t in plans.TRANSITIONS if t.step_to is StagedStepState.SENDING] == [plans.SEND]
    # Nothing leaves aborted.
    assert not [t for t in plans.TRANSITIONS if PlanState.ABORTED in t.plan_from and t.plan_to]


def test_the_readme_draws_both() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    drawn = re.findall(r"```mermaid\n(stateDiagram-v2\n.*?)\n```", readme, re.DOTALL)
    assert plans.mermaid() in drawn and plans.steps_mermaid() in drawn


def test_no_module_outside_the_table_writes_a_state() -> None:
    writes = re.compile(r"\b(move_plan|new_plan)\(")
    writers = {
        str(path.relative_to(ROOT))
        for folder in ("bot", "handlers")
        for path in (ROOT / folder).rglob("*.py")
        if "store" not in path.relative_to(ROOT).parts and writes.search(path.read_text())
    }
    assert writers == {"bot/core/lifecycle/plans.py"}
