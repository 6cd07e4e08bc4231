"""The import graph keeps what is asked flowing one way (issue #35): no core module imports
the Slack layer or the listeners, and what reads and checks an ask (``bot.core.ask``)
imports none of what takes it (the command service, the Workflow Builder steps, the chat
layers). import-linter enforces the layers as contracts too; this names each arrow that
would break them."""

from __future__ import annotations

import grimp
import pytest

SLACK = ("bot.slack", "handlers", "slack_sdk", "slack_bolt")
ABOVE_THE_ASK = ("bot.core.service", "bot.core.builder_steps", *SLACK)


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("bot", "handlers", include_external_packages=True)


def _arrows(graph: grimp.ImportGraph, source: str, targets: tuple[str, ...]) -> list[str]:
    found: list[str] = []
    for module in sorted(graph.find_descendants(source) | {source}):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if any(imported == t or imported.startswith(t + ".") for t in targets):
                found.append(f"{module} -> {imported}")
    return found


def test_no_core_module_imports_slack_or_the_handlers(graph: grimp.ImportGraph) -> None:
    assert _arrows(graph, "bot.core", SLACK) == []


def test_reading_an_ask_imports_nothing_that_takes_it(graph: grimp.ImportGraph) -> None:
    assert _arrows(graph, "bot.core.ask", ABOVE_THE_ASK) == []


def test_the_change_workflow_imports_no_reader_of_commands(graph: grimp.ImportGraph) -> None:
    """The workflow takes a ChangeAsk as it is: it never reads a command's text again."""
    readers = ("bot.core.ask.grammar", "bot.core.ask.reading", "bot.core.ask.forms")
    assert _arrows(graph, "bot.core.requests", readers) == []


@pytest.mark.parametrize("above", ["handlers", "bot.slack"])
def test_what_stands_above_imports_the_core_only_through_its_front_door(
    graph: grimp.ImportGraph, above: str
) -> None:
    """Any module of bot.core but bot.core.api, a room added later included."""
    rooms = tuple(m for m in graph.find_children("bot.core") if m != "bot.core.api")
    assert _arrows(graph, above, rooms) == []
