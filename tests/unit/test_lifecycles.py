"""The remediation decision and Workflow Builder step tables (bot.core.lifecycle): each
covers every state, every open state has a way out and ended ones none, the README draws
each, no module outside the table writes its states, and every row of the table is applied
by the production code (none is dead)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from bot.core.lifecycle import builder_steps, remediations
from bot.core.lifecycle.drawing import Row
from bot.core.store.builder_steps import StepState
from bot.core.store.watch import RemediationDecision

ROOT = Path(__file__).resolve().parents[2]
TABLES = {
    "remediations": remediations,
    "builder_steps": builder_steps,
}
STATES = {"remediations": RemediationDecision, "builder_steps": StepState}
FINALS = {
    "remediations": remediations.FINAL_DECISIONS,
    "builder_steps": builder_steps.FINAL_STATES,
}
# The store calls that write each table's states; only the table's module makes them.
STATE_WRITES = {
    "remediations": re.compile(
        r"(\.(decide_remediation|claim_remediation|remediation_posted|give_up_remediation)"
        r"|\bmove_remediation)\("
    ),
    "builder_steps": re.compile(r"\b(move_step|new_step|_new_step)\("),
}


def _production() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
        for folder in ("bot", "handlers")
        for path in (ROOT / folder).rglob("*.py")
        if "store" not in path.relative_to(ROOT).parts
    }


def _rows(name: str) -> tuple[Row, ...]:
    rows: tuple[Row, ...] = TABLES[name].TRANSITIONS
    return rows


def _leaving(rows: Iterable[Row], state: object) -> list[Row]:
    return [t for t in rows if state in t.from_states and t.to is not None and t.to is not state]


@pytest.mark.parametrize("name", TABLES)
def test_every_state_is_reached_from_an_opening(name: str) -> None:
    rows = _rows(name)
    reached: set[object] = set()
    frontier: set[object] = {t.to for t in rows if not t.from_states}
    while frontier:
        reached |= frontier
        frontier = {t.to for t in rows if t.from_states & reached and t.to is not None}
        frontier -= reached
    assert reached == set(STATES[name])


@pytest.mark.parametrize("name", TABLES)
def test_every_open_state_has_a_way_out_and_ended_ones_none(name: str) -> None:
    rows = _rows(name)
    for state in STATES[name]:
        if state in FINALS[name]:
            assert not _leaving(rows, state), state
        else:
            assert _leaving(rows, state), f"{state} has no way out"


@pytest.mark.parametrize("name", TABLES)
def test_names_are_unique(name: str) -> None:
    names = [t.name for t in _rows(name)]
    assert len(names) == len(set(names))


def test_each_remediation_move_is_audited() -> None:
    assert all(t.audit_event.startswith("remediation_") for t in remediations.TRANSITIONS)
    assert remediations.CLICK.audit_event.format(verb="reject") == "remediation_reject"


@pytest.mark.parametrize("name", TABLES)
def test_the_readme_draws_the_table(name: str) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    drawn = re.findall(r"```mermaid\n(stateDiagram-v2\n.*?)\n```", readme, re.DOTALL)
    assert TABLES[name].mermaid() in drawn, f"README does not draw the {name} table"


@pytest.mark.parametrize("name", TABLES)
def test_no_module_outside_the_table_writes_a_state(name: str) -> None:
    writers = {path for path, text in _production().items() if STATE_WRITES[name].search(text)}
    assert writers == {f"bot/core/lifecycle/{name}.py"}


def _used(table: str, name: str) -> bool:
    """Whether production code outside the table applies ``lifecycle.<name>``."""
    own = f"bot/core/lifecycle/{table}.py"
    pattern = re.compile(rf"\blifecycle\.{re.escape(name)}\b")
    return any(pattern.search(text) for path, text in _production().items() if path != own)


D = RemediationDecision
SENT_ENDS = (D.APPROVED, D.REJECTED, D.ALREADY_DECIDED, D.UNKNOWN, D.AWAITING)


def test_every_remediation_row_is_applied() -> None:
    """A row is applied by its name, or through the helper that picks it (``sent`` for a
    sent call's answer, ``gone`` by the decision seen, ``claim``/``posted`` for the post)."""
    picked = {
        "sent": {remediations.sent(d) for d in SENT_ENDS},
        "gone": {remediations.gone(d) for d in RemediationDecision},
        "posted": {remediations.POST},
    }
    applied = {t for helper, rows in picked.items() if _used("remediations", helper) for t in rows}
    applied |= {
        t
        for t in remediations.TRANSITIONS
        if _used("remediations", t.name.upper().replace("-", "_"))
    }
    assert _used("remediations", "claim")  # the post's first half
    assert set(remediations.TRANSITIONS) == applied


def test_every_builder_step_row_is_applied() -> None:
    by_function = {
        "claim": builder_steps.CLAIM,
        "refuse": builder_steps.REFUSE,
        "begin_completion": builder_steps.BEGIN_COMPLETION,
        "retake_completion": builder_steps.RETAKE,
        "completed": builder_steps.COMPLETE,
    }
    assert set(by_function.values()) == set(builder_steps.TRANSITIONS)
    for function in by_function:
        assert _used("builder_steps", function), function
