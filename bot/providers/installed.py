"""The catalog's loader: the two built-in providers and any an installed package registers
under the entry point group ``gpuops.providers`` (each entry names a ProviderDescriptor).
Only the composition root (``bot.runtime``, the CLI's entry points, the local tools) reads
it, once at start, and passes the ``Catalog`` on (an import-linter contract)."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from bot.providers import e2e, together
from bot.providers.catalog import Catalog, CatalogError
from bot.providers.descriptor import ProviderDescriptor

ENTRY_POINT_GROUP = "gpuops.providers"
BUILT_IN: tuple[ProviderDescriptor, ...] = (together.DESCRIPTOR, e2e.DESCRIPTOR)


def registered() -> list[ProviderDescriptor]:
    """The descriptors the installed distributions name under ``gpuops.providers``."""
    found = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        named = f"entry point {entry.name} = {entry.value} ({ENTRY_POINT_GROUP}{_from(entry)})"
        try:
            loaded = entry.load()
        except Exception as exc:  # a broken package: named, not a traceback from an import
            raise CatalogError(
                f"{named} could not be loaded ({type(exc).__name__}: {exc}); "
                "fix or uninstall that package"
            ) from exc
        if not isinstance(loaded, ProviderDescriptor):
            raise CatalogError(f"{named} is not a ProviderDescriptor")
        found.append(loaded)
    return found


def _from(entry: EntryPoint) -> str:
    dist = entry.dist
    return f", from {dist.name} {dist.version}" if dist is not None else ""


def load_catalog() -> Catalog:
    """Every installed provider, the built-in ones first (CatalogError for a broken one)."""
    return Catalog.of([*BUILT_IN, *registered()])


def built_in_catalog() -> Catalog:
    """The built-in providers only (no entry point read)."""
    return Catalog.of(BUILT_IN)
