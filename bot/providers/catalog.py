"""The providers gpuops knows, as descriptors: the two built in and any an installed package
registers under the entry point group ``gpuops.providers`` (each entry names a
ProviderDescriptor). The policy, the command grammar, the forms, help and ``check-config``
are built from this list; nothing else names a provider."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points

from bot.errors import GpuopsError
from bot.providers import e2e, together
from bot.providers.base import ProviderChanges, ProviderDescriptor, ProviderName

ENTRY_POINT_GROUP = "gpuops.providers"
BUILT_IN: tuple[ProviderDescriptor, ...] = (together.DESCRIPTOR, e2e.DESCRIPTOR)
# The /gpu words that are not a provider's change verb.
RESERVED_WORDS = frozenset({"help", "list", "show", "audit", "timeline", "policy"})


class CatalogError(GpuopsError):
    """A registered provider cannot be used (not a descriptor, or a name or verb taken)."""


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


def check(candidates: list[ProviderDescriptor]) -> tuple[ProviderDescriptor, ...]:
    """The candidates once each, or CatalogError for a name or a change verb taken twice
    (or one of gpuops's own words)."""
    by_name: dict[str, ProviderDescriptor] = {}
    verbs: dict[str, str] = {}
    for descriptor in candidates:
        if by_name.get(descriptor.name) is descriptor:
            continue  # a built-in registered through the group as well
        if descriptor.name in by_name:
            raise CatalogError(f"two providers are named {descriptor.name}")
        taken = verbs.get(descriptor.verb)
        if descriptor.verb in RESERVED_WORDS or taken is not None:
            owner = taken or "gpuops"
            raise CatalogError(
                f"provider {descriptor.name}: the word `{descriptor.verb}` is {owner}'s"
            )
        by_name[descriptor.name] = descriptor
        verbs[descriptor.verb] = descriptor.name
    return tuple(by_name.values())


@functools.cache
def descriptors() -> tuple[ProviderDescriptor, ...]:
    """Every provider, the built-in ones first; read once per process."""
    return check([*BUILT_IN, *registered()])


def descriptor(name: ProviderName) -> ProviderDescriptor:
    """The provider of that name; KeyError names the known ones."""
    for found in descriptors():
        if found.name == name:
            return found
    known = ", ".join(d.name for d in descriptors())
    raise KeyError(f"unknown provider '{name}' (known: {known})")


def by_verb(verb: str) -> ProviderDescriptor | None:
    """The provider whose change verb ``verb`` is (``update`` → Together), if any."""
    return next((d for d in descriptors() if d.verb == verb), None)


def provider_changes() -> Mapping[ProviderName, ProviderChanges]:
    """What each provider can change, by name (for help text and command checks)."""
    return {d.name: d.changes for d in descriptors()}
