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


def _reads_beside(path: Path) -> bool:
    """``path`` names ../shared, or climbs from its own folder above the checkout
    (``Path(__file__).parents[N]`` with N past the checkout's root)."""
    text = path.read_text(encoding="utf-8")
    top = len(path.relative_to(ROOT).parts) - 1  # parents[top] is the checkout itself
    climbs = (int(n) for n in re.findall(r"parents\[(\d+)\]", text))
    return bool(re.search(r"\.\./shared|shared/specs", text)) or any(n > top for n in climbs)


def test_no_test_reads_a_folder_beside_the_checkout() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("tests", "bot", "handlers", "bench")
        for path in (ROOT / folder).rglob("*.py")
        if path != Path(__file__) and _reads_beside(path)
    ]
    assert offenders == []
