"""The specs the contract tests read are in the repository, each listed with its source and
digest in tests/specs/SOURCES.md, and no test reaches outside the checkout for them."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tests.support.openapi_contract import SPECS_DIR

ROOT = Path(__file__).resolve().parents[2]
_ROW = re.compile(r"^\| `(?P<file>[^`]+)` \|.*\| `(?P<sha>[0-9a-f]{64})` \|$", re.MULTILINE)


def _listed() -> dict[str, str]:
    sources = (SPECS_DIR / "SOURCES.md").read_text(encoding="utf-8")
    return {m["file"]: m["sha"] for m in _ROW.finditer(sources)}


def test_the_specs_live_inside_the_checkout() -> None:
    assert SPECS_DIR.resolve().is_relative_to(ROOT)


def test_every_spec_file_is_listed_with_its_digest() -> None:
    files = {p.name for p in SPECS_DIR.iterdir() if p.name != "SOURCES.md"}
    listed = _listed()
    assert files == set(listed), "tests/specs and SOURCES.md disagree"
    for name, digest in listed.items():
        actual = hashlib.sha256((SPECS_DIR / name).read_bytes()).hexdigest()
        assert actual == digest, f"{name} changed without its SOURCES.md line"


def test_no_test_reads_a_folder_beside_the_checkout() -> None:
    outside = re.compile(r"parents\[[3-9]\]|\.\./shared|shared/specs")
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("tests", "bot", "handlers", "bench")
        for path in (ROOT / folder).rglob("*.py")
        if path != Path(__file__) and outside.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
