"""No production module is over 400 lines (issue #35): a module that grows past it is split by
job. Production is every module under bot/ and handlers/ but the local tools (bot/local/:
simulators, the Slack stand-in, the demo), which never ship in the image."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MOST_LINES = 400


def production_modules() -> list[Path]:
    """Every ``.py`` file of bot/ and handlers/, bot/local/ left out."""
    local = ROOT / "bot" / "local"
    return sorted(
        path
        for folder in ("bot", "handlers")
        for path in (ROOT / folder).rglob("*.py")
        if not path.is_relative_to(local)
    )


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_production_modules_are_found() -> None:
    found = {str(path.relative_to(ROOT)) for path in production_modules()}
    assert {"bot/runtime.py", "bot/core/requests/workflow.py", "handlers/commands.py"} <= found
    assert not any(name.startswith("bot/local/") for name in found)


def test_no_production_module_is_over_400_lines() -> None:
    offenders = {
        str(path.relative_to(ROOT)): lines
        for path in production_modules()
        if (lines := line_count(path)) > MOST_LINES
    }
    named = ", ".join(f"{name} ({lines} lines)" for name, lines in sorted(offenders.items()))
    assert not offenders, f"over {MOST_LINES} lines, split each by job: {named}"
