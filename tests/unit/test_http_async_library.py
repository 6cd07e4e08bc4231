"""httpcore asks which async library runs it (``import sniffio``) for every lock, event
and cancellation shield of every request. Without sniffio installed each of those imports
searches the whole path and fails (≈0.3 ms a time); installed, it is found in
``sys.modules`` and the path is never searched again."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType

import pytest

from tests.support.e2e_kit import make_adapter, running_simulator

REQUESTS = 20


class LookupRecorder(importlib.abc.MetaPathFinder):
    """Writes down every module the import system searches the path for (a module already
    in ``sys.modules`` is never searched); finds nothing itself."""

    def __init__(self) -> None:
        self.searched: list[str] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        self.searched.append(fullname)
        return None


@pytest.fixture
def lookups() -> Iterator[LookupRecorder]:
    recorder = LookupRecorder()
    sys.meta_path.insert(0, recorder)
    try:
        yield recorder
    finally:
        sys.meta_path.remove(recorder)


async def test_provider_requests_never_search_for_an_async_library(
    lookups: LookupRecorder,
) -> None:
    async with running_simulator() as sim:
        adapter = make_adapter(sim.base_url)
        try:
            await adapter.get_cluster("101")  # the first request may import what it needs
            lookups.searched.clear()
            for _ in range(REQUESTS):
                await adapter.get_cluster("101")
        finally:
            await adapter.aclose()
    assert lookups.searched == []
    assert "sniffio" in sys.modules
