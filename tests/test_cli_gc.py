"""gpuops serve / socket exempt what start-up built from garbage collection, so that a
full collection under load does not pause the event loop for tens of milliseconds."""

from __future__ import annotations

import gc

from bot.cli import _freeze_startup_heap


def test_the_startup_heap_is_frozen_out_of_garbage_collection() -> None:
    assert gc.get_freeze_count() == 0
    startup_objects = [{"n": n} for n in range(1000)]
    try:
        _freeze_startup_heap()
        assert gc.get_freeze_count() >= len(startup_objects)
        assert gc.isenabled()  # young objects are still collected
    finally:
        gc.unfreeze()
