"""The docs a newcomer reads stay true: every setting is in the README, every migration in the
changelog, the interface is documented in the repository (no pointer to a file that is not
here), every name of the interface the code defines is in docs/INTERFACE.md, and the
simulators' fault kinds are listed where people look for them."""

from __future__ import annotations

import re
from pathlib import Path

from bot.config import Settings
from bot.core.store.migrations import MIGRATIONS
from bot.local.simulators.base import FaultKind
from tests.support import interface

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


def _code_text(markdown: str) -> str:
    """What the document shows as code: its fenced blocks and its `inline` spans."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.MULTILINE | re.DOTALL)
    rest = re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)
    return "\n".join([*fenced, *re.findall(r"`([^`\n]+)`", rest)])


def _undocumented(words: object) -> list[str]:
    code = _code_text(INTERFACE.read_text(encoding="utf-8"))
    assert isinstance(words, list | set | tuple)

    def named(word: str) -> bool:
        end = r"(?!\w)" if word[-1].isalnum() or word[-1] == "_" else ""  # `page=` ends anyhow
        return re.search(rf"(?<![\w-]){re.escape(word)}{end}", code) is not None

    return sorted({str(word) for word in words if not named(str(word))})


def test_every_command_and_cli_word_of_the_code_is_in_the_interface() -> None:
    assert _undocumented(interface.commands()) == []
    assert _undocumented(interface.cli_words()) == []


def test_every_setting_and_policy_key_of_the_code_is_in_the_interface() -> None:
    assert _undocumented(interface.settings()) == []
    assert _undocumented(interface.policy_keys()) == []
    assert _undocumented(interface.provider_words()) == []


def test_every_slack_id_and_scope_of_the_code_is_in_the_interface() -> None:
    """action_ids, callback_ids, events and the function the handlers register, and the
    manifest's scopes, events and function parameters."""
    assert _undocumented([name for _, name in interface.registrations()]) == []
    assert _undocumented(interface.slack_words()) == []


def test_the_interface_numbers_its_sections_without_a_gap_and_cites_no_absent_file() -> None:
    text = INTERFACE.read_text(encoding="utf-8")
    numbers = [int(n) for n in re.findall(r"^## (\d+)\. ", text, flags=re.MULTILINE)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 12
    docs = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    for doc in docs:
        assert "SPEC.md" not in doc.read_text(encoding="utf-8"), doc.name


def test_no_doc_numbers_two_sections_alike() -> None:
    """RELIABILITY.md had two sections "5d" (issue 33 item 12)."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        numbers = re.findall(r"^#+ (\d+[a-z]?(?:\.\d+)*)\. ", text, flags=re.MULTILINE)
        assert sorted(numbers) == sorted(set(numbers)), doc.name
