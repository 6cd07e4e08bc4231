"""README's "Adding a provider" says what Lumen needed: its entry point group and line, its
policy section and credential, and its commands."""

from __future__ import annotations

import re
from pathlib import Path

from bot.providers import installed
from tests.thirdprovider.conftest import ENTRY_POINTS
from tests.thirdprovider.descriptor import DESCRIPTOR, LumenSection

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
SECTION = README.split("## Adding a provider", 1)[1].split("\n## ", 1)[0]


def _snippet(language: str) -> str:
    found = re.search(rf"```{language}\n(.*?)```", SECTION, re.S)
    assert found is not None, language
    return "\n".join(line.strip() for line in found.group(1).splitlines())


def test_the_entry_point_is_the_one_the_catalog_reads_and_the_tests_register() -> None:
    toml = _snippet("toml")
    assert f'[project.entry-points."{installed.ENTRY_POINT_GROUP}"]' in toml
    assert f"[{installed.ENTRY_POINT_GROUP}]" in ENTRY_POINTS
    assert toml.splitlines()[1].split(" = ")[0] == DESCRIPTOR.name == "lumen"


def test_the_policy_section_credential_and_base_url_are_lumens() -> None:
    keys = _snippet("yaml").splitlines()[2:]  # the keys under ``lumen-lab:``
    section = LumenSection.model_validate(dict(line.split(": ", 1) for line in keys if line))
    assert section.credential_variables() == ["LUMEN_TOKEN"] and "(`LUMEN_TOKEN`)" in SECTION
    assert DESCRIPTOR.base_url_variable == "LUMEN_BASE_URL" and "`<NAME>_BASE_URL`" in SECTION
