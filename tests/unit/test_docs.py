"""The docs a newcomer reads stay true: every setting is in the README, every migration in the
changelog, the interface is documented in the repository (no pointer to a file that is not
here), and the simulators' fault kinds are listed where people look for them."""

from __future__ import annotations

import re
from pathlib import Path

from bot.config import Settings
from bot.core.store.migrations import MIGRATIONS
from bot.local.simulators.base import FaultKind

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
INTERFACE = ROOT / "docs" / "INTERFACE.md"


def test_every_setting_of_the_config_is_in_the_readme() -> None:
    missing = [name.upper() for name in Settings.model_fields if name.upper() not in README]
    assert missing == []


def test_the_interface_is_documented_in_the_repository() -> None:
    assert "(docs/INTERFACE.md)" in README and INTERFACE.is_file()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#]+)", doc.read_text(encoding="utf-8")):
            if not target.startswith("http"):
                assert (doc.parent / target).exists(), f"{doc.name} links to {target}"
    assert "SPEC.md" not in README


def test_the_fault_kinds_are_listed_in_the_readme_and_the_interface() -> None:
    interface = INTERFACE.read_text(encoding="utf-8")
    for kind in FaultKind:
        assert f"`{kind.value}`" in README and f"`{kind.value}`" in interface


def test_the_readme_says_what_make_test_needs_and_that_the_schema_migrates_itself() -> None:
    assert "PostgreSQL on `127.0.0.1:5432`" in README
    assert "POSTGRES_HOST_AUTH_METHOD=trust" in README
    assert "applies the migrations it lacks" in README
    assert "**Break glass.**" in README and "examples/demo-policy.yml" in README


def test_the_changelog_lists_every_migration_in_order() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    listed = changelog.split("### Migrations", 1)[1]
    numbered = re.findall(r"^(\d+)\. (.+)$", listed, flags=re.MULTILINE)
    assert [int(number) for number, _ in numbered] == [m.version for m in MIGRATIONS]
    for (_, line), migration in zip(numbered, MIGRATIONS, strict=True):
        assert line.startswith(migration.description), (line, migration.description)
