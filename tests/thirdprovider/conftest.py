"""Lumen registered as an installed package's provider would be: a ``.dist-info`` with an
``entry_points.txt`` under a directory that joins ``sys.path`` (and a child's PYTHONPATH),
so ``importlib.metadata`` finds a real distribution; nothing is installed."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ENTRY_POINTS = "[gpuops.providers]\nlumen = tests.thirdprovider.descriptor:DESCRIPTOR\n"


@pytest.fixture
def lumen_site(tmp_path: Path) -> Path:
    """A directory holding the ``gpuops-lumen`` distribution's metadata."""
    site = tmp_path / "site"
    info = site / "gpuops_lumen-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gpuops-lumen\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


@pytest.fixture
def lumen_registered(lumen_site: Path) -> Iterator[Path]:
    """The distribution on ``sys.path`` (a catalog loaded meanwhile lists Lumen); off it
    afterwards."""
    sys.path.insert(0, str(lumen_site))
    try:
        yield lumen_site
    finally:
        sys.path.remove(str(lumen_site))
