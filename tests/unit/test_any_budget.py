"""``Any`` in production signatures only goes down: the parameter and return annotations of
bot/ and handlers/ (not bot/local, the local tools) hold at most ``CEILING`` of them.

A value only passed along is ``object``; JSON is ``Mapping[str, object]`` until a pydantic
model or a TypedDict says more; rows are SQLAlchemy's ``RowMapping``. Lower the ceiling when
you take some out; never raise it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CEILING = 26  # issue 35: 310 when measured, 253 when this began


def any_in_signatures(source: str) -> int:
    """How many times ``Any`` (or ``typing.Any``) is named in the parameter and return
    annotations of the functions of ``source``."""
    found = 0
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = node.args
        arguments = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        annotations = [a.annotation for a in arguments if a is not None] + [node.returns]
        for annotation in annotations:
            if annotation is None:
                continue
            found += sum(
                1
                for name in ast.walk(annotation)
                if (isinstance(name, ast.Name) and name.id == "Any")
                or (isinstance(name, ast.Attribute) and name.attr == "Any")
            )
    return found


def production_modules() -> list[Path]:
    modules = [*(ROOT / "bot").rglob("*.py"), *(ROOT / "handlers").rglob("*.py")]
    return sorted(p for p in modules if (ROOT / "bot" / "local") not in p.parents)


def any_by_module() -> dict[str, int]:
    counts = {
        str(p.relative_to(ROOT)): any_in_signatures(p.read_text()) for p in production_modules()
    }
    return {name: n for name, n in counts.items() if n}


def test_the_counter_sees_any_in_every_place_of_a_signature() -> None:
    source = (
        "import typing\n"
        "from typing import Any\n"
        "def f(a: Any, /, b: list[Any], *c: Any, d: typing.Any, **e: Any) -> dict[str, Any]: ...\n"
        "async def g(x: object) -> None:\n"
        "    y: Any = x\n"  # a local's annotation is not the signature's
    )
    assert any_in_signatures(source) == 6


def test_any_in_production_signatures_stays_under_the_ceiling() -> None:
    counts = any_by_module()
    total = sum(counts.values())
    worst = ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    assert total <= CEILING, (
        f"{total} Any in production signatures, more than the ceiling of {CEILING}: type "
        f"what was added (by file: {worst})"
    )
