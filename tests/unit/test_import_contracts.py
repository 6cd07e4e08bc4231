"""The import contracts (pyproject's import-linter section) cover every production module:
each top-level module of ``bot`` (but the local tools) and ``handlers`` is in a layer, and the
"never imports the local tools" contract starts from the root packages, so a module added
later is covered without editing a list."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return found


def production_modules() -> set[str]:
    """``bot.<name>`` for each module and package under bot/ but bot.local, and handlers."""
    bot = ROOT / "bot"
    names = {p.stem for p in bot.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in bot.iterdir() if (p / "__init__.py").exists()}
    return {f"bot.{name}" for name in names - {"local"}} | {"handlers"}


def test_every_production_module_is_in_a_layer() -> None:
    layers = next(c for c in contracts() if c["type"] == "layers")["layers"]
    in_layers = {m for layer in layers for m in re.split(r"[|:]", layer) if m.strip()}
    in_layers = {m.strip() for m in in_layers}
    assert production_modules() - in_layers == set()
    assert "bot.local" not in in_layers


def test_the_local_tools_contract_starts_from_the_root_packages() -> None:
    local = next(c for c in contracts() if c.get("forbidden_modules") == ["bot.local"])
    assert set(local["source_modules"]) == {"bot", "handlers"}
    # only the local tools' own imports and the CLI's commands that run them are let through
    assert {i.split(" -> ")[0] for i in local["ignore_imports"]} == {"bot.local.**", "bot.cli"}
