"""The policy package owns the whole schema and has no arrow back up: its modules import,
of the core, only each other and what sits under the policy (the store, the notifier port);
none is over 400 lines. Only the composition root reads the installed providers."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "bot" / "core" / "policy"
# What the policy may import of the core besides itself: the reload notices' store and port.
BELOW = ("bot.core.store", "bot.core.notifier")
# Who may read the installed providers (bot.providers.installed): the composition root.
ROOTS = ("bot/runtime.py", "bot/cli.py", "bot/local/")


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def _within(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in packages)


def test_the_policy_package_imports_nothing_of_the_core_above_it() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    assert {m.name for m in modules} >= {"model.py", "guardrails.py", "watch.py", "reload.py"}
    upward = [
        f"{path.name}: {module}"
        for path in modules
        for module in _imports(path)
        if _within(module, "bot.core") and not _within(module, "bot.core.policy", *BELOW)
        if not _within(module.rsplit(".", 1)[0], "bot.core.policy", *BELOW)
    ]
    assert upward == []


def test_no_policy_module_is_over_400_lines() -> None:
    long = {
        path.name: lines
        for path in PACKAGE.glob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert long == {}


def test_nothing_else_in_the_core_holds_a_policy_section() -> None:
    assert not (ROOT / "bot" / "core" / "guardrails" / "config.py").exists()
    assert not (ROOT / "bot" / "core" / "watch" / "config.py").exists()
    assert not list((ROOT / "bot" / "core").glob("policy_*.py"))


def test_only_the_composition_root_reads_the_installed_providers() -> None:
    readers = sorted(
        str(path.relative_to(ROOT))
        for folder in ("bot", "handlers")
        for path in (ROOT / folder).rglob("*.py")
        if any(_within(m, "bot.providers.installed") for m in _imports(path))
    )
    assert readers, "the composition root reads them somewhere"
    assert [r for r in readers if not r.startswith(ROOTS)] == []
