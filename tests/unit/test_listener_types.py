"""The listeners are typed and find their services one way: no listener parameter is
``Any`` (or unannotated), and only bot.slack.bolt_context reads or writes a key of Bolt's
context by its string name."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ACCESSOR = ROOT / "bot" / "slack" / "bolt_context.py"
# The listeners live in handlers/; the Slack layer has one, the app's error handler.
LISTENERS_IN_SLACK_LAYER = ROOT / "bot" / "slack" / "app.py"
# The names Bolt injects into a listener by parameter name.
BOLT_ARGUMENTS = {"ack", "body", "event", "context", "respond", "say", "client", "logger"}


def _modules(*folders: str) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _mentions_any(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return True
    return any(
        (isinstance(n, ast.Name) and n.id == "Any")
        or (isinstance(n, ast.Attribute) and n.attr == "Any")
        for n in ast.walk(annotation)
    )


def untyped_listener_parameters(source: str) -> list[str]:
    """``function(parameter)`` for each Bolt-injected parameter typed Any or not at all."""
    found = []
    for function in _functions(ast.parse(source)):
        for arg in function.args.args + function.args.kwonlyargs:
            if arg.arg in BOLT_ARGUMENTS and _mentions_any(arg.annotation):
                found.append(f"{function.name}({arg.arg})")
    return found


def _is_context(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "context") or (
        isinstance(node, ast.Attribute) and node.attr == "context"
    )


def context_key_uses(source: str) -> list[int]:
    """Lines that index a context by a string, call its get() or update()."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Subscript) and _is_context(node.value)) or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "update", "setdefault", "pop")
            and _is_context(node.func.value)
        ):
            lines.append(node.lineno)
    return lines


def test_no_listener_takes_any() -> None:
    found = {
        str(path.relative_to(ROOT)): untyped
        for path in [*_modules("handlers"), LISTENERS_IN_SLACK_LAYER]
        if (untyped := untyped_listener_parameters(path.read_text()))
    }
    assert found == {}


def test_only_the_accessor_uses_context_keys() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for path in _modules("handlers", "bot/slack")
        if path != ACCESSOR and (lines := context_key_uses(path.read_text()))
    }
    assert found == {}


def test_the_checks_catch_what_they_forbid() -> None:
    listener = "async def handle(ack: Any, body: dict[str, Any], context) -> None: ...\n"
    assert untyped_listener_parameters(listener) == [
        "handle(ack)",
        "handle(body)",
        "handle(context)",
    ]
    lookups = 'ops = context["gpuops"]\nkey = req.context.get("delivery_key")\n'
    assert context_key_uses(lookups) == [1, 2]
    assert context_key_uses(ACCESSOR.read_text()) != []
