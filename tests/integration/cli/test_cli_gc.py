"""gpuops serve / socket exempt what start-up built from garbage collection and make full
collections rare, so that a full collection under load does not pause the event loop for
tens of milliseconds every second or so."""

from __future__ import annotations

import gc

import pytest

from bot.serving import FULL_COLLECTION_EVERY as _FULL_COLLECTION_EVERY
from bot.serving import freeze_startup_heap as _freeze_startup_heap


def test_the_startup_heap_is_frozen_out_of_garbage_collection() -> None:
    assert gc.get_freeze_count() == 0
    startup_objects = [{"n": n} for n in range(1000)]
    thresholds = gc.get_threshold()
    try:
        _freeze_startup_heap()
        assert gc.get_freeze_count() >= len(startup_objects)
        assert gc.isenabled()  # young objects are still collected
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_full_collections_come_rarer_and_young_ones_as_before() -> None:
    young, middle, full = thresholds = gc.get_threshold()
    try:
        _freeze_startup_heap()
        assert gc.get_threshold() == (young, middle, _FULL_COLLECTION_EVERY)
        assert 10 * full <= _FULL_COLLECTION_EVERY
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_gpuops_log_level_sets_the_log_level(monkeypatch: pytest.MonkeyPatch) -> None:
    import bot.cli

    seen: list[str] = []
    monkeypatch.setenv("GPUOPS_LOG_LEVEL", "DEBUG")
    monkeypatch.setattr(bot.cli, "_configure_logging", seen.append)
    monkeypatch.setattr(bot.cli, "_simulate", _no_simulator)
    bot.cli.main(["simulate"])
    assert seen == ["DEBUG"]
    bot.cli.main(["--log-level", "WARNING", "simulate"])  # the flag wins over the env
    assert seen == ["DEBUG", "WARNING"]


async def _no_simulator(host: str, port: int, transition_seconds: float) -> None:
    return None
