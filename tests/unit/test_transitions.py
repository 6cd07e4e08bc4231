"""The lifecycle table (bot.core.requests.table): it covers every state, every open state has
a way out, ended ones have none (but the correction of ``unknown``), the README draws this
table, and no module but bot.core.requests.transitions (which applies it) writes a
request's state."""

from __future__ import annotations

import re
from pathlib import Path

from bot.core.requests import table
from bot.core.requests.table import TRANSITIONS, mermaid
from bot.core.store import TERMINAL_STATES, RequestState

ROOT = Path(__file__).resolve().parents[2]
# The store methods that write a request's state; only the table's module calls them.
STATE_WRITES = re.compile(
    r"store\.(transition|open_request|start_execution|"
    r"finish_execution|end_interrupted)\("
)


def test_every_state_is_reached_from_an_opening() -> None:
    reached: set[RequestState] = set()
    frontier = {t.to for t in TRANSITIONS if not t.from_states}
    while frontier:
        reached |= frontier
        frontier = {t.to for t in TRANSITIONS if t.from_states & reached} - reached
    assert reached == set(RequestState)


def test_every_open_state_has_a_way_out_and_ended_ones_none_but_the_correction() -> None:
    for state in RequestState:
        leaving = [t for t in TRANSITIONS if state in t.from_states and t.to is not state]
        if state in TERMINAL_STATES:
            allowed = (
                {table.CORRECT_SUCCEEDED, table.CORRECT_FAILED}
                if state is RequestState.UNKNOWN
                else set()
            )
            assert set(leaving) == allowed, state
        else:
            assert leaving, f"{state} has no way out"


def test_names_are_unique_and_each_transition_is_audited() -> None:
    names = [t.name for t in TRANSITIONS]
    assert len(names) == len(set(names))
    assert all(t.audit_event for t in TRANSITIONS)
    # Only openings show the request itself; every other transition tells what happened.
    assert {t.name for t in TRANSITIONS if t.told is None} == {"open", "open-approved"}


def test_a_finish_and_a_correction_exist_for_each_outcome() -> None:
    for to in (RequestState.SUCCEEDED, RequestState.FAILED, RequestState.UNKNOWN):
        assert table.finished(to).to is to
        assert table.finished(to).from_states == {RequestState.EXECUTING}
    for to in (RequestState.SUCCEEDED, RequestState.FAILED):
        assert table.corrected(to).from_states == {RequestState.UNKNOWN}


def test_the_readme_draws_the_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    drawn = re.search(r"```mermaid\n(stateDiagram-v2\n.*?)\n```", readme, re.DOTALL)
    assert drawn is not None, "README has no state diagram"
    assert drawn.group(1) == mermaid()
    for t in TRANSITIONS:
        assert t.name in drawn.group(1)


def test_no_module_outside_the_table_writes_a_state() -> None:
    writers = {
        str(path.relative_to(ROOT))
        for folder in ("bot", "handlers")
        for path in (ROOT / folder).rglob("*.py")
        if "store" not in path.relative_to(ROOT).parts
        and STATE_WRITES.search(path.read_text(encoding="utf-8"))
    }
    assert writers == {"bot/core/requests/transitions.py"}
