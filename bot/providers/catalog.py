"""The providers gpuops knows, as one value: a ``Catalog`` of descriptors, built once at
start by the composition root (``bot.providers.installed`` reads the built-ins and the
``gpuops.providers`` entry points) and passed to the policy schema, the command grammar,
the forms, help and ``check-config``. Nothing else names a provider, and nothing reads the
installed providers at import time."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from bot.errors import GpuopsError
from bot.providers.base import ProviderChanges, ProviderName
from bot.providers.descriptor import ProviderDescriptor

# The /gpu words that are not a provider's change verb.
RESERVED_WORDS = frozenset({"help", "list", "show", "audit", "timeline", "policy"})


class CatalogError(GpuopsError):
    """A registered provider cannot be used (not a descriptor, or a name or verb taken)."""


def check(candidates: Iterable[ProviderDescriptor]) -> tuple[ProviderDescriptor, ...]:
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


@dataclass(frozen=True, eq=False)  # compared (and hashed) by identity: one per process
class Catalog:
    """Every provider of this process, in order (the built-in ones first)."""

    descriptors: tuple[ProviderDescriptor, ...]

    @classmethod
    def of(cls, candidates: Iterable[ProviderDescriptor]) -> Catalog:
        """The catalog of these descriptors, checked (CatalogError for a clash)."""
        return cls(check(candidates))

    def __iter__(self) -> Iterator[ProviderDescriptor]:
        return iter(self.descriptors)

    @property
    def names(self) -> tuple[ProviderName, ...]:
        return tuple(d.name for d in self.descriptors)

    def descriptor(self, name: ProviderName) -> ProviderDescriptor:
        """The provider of that name; KeyError names the known ones."""
        for found in self.descriptors:
            if found.name == name:
                return found
        raise KeyError(f"unknown provider '{name}' (known: {', '.join(self.names)})")

    def by_verb(self, verb: str) -> ProviderDescriptor | None:
        """The provider whose change verb ``verb`` is (``update`` → Together), if any."""
        return next((d for d in self.descriptors if d.verb == verb), None)

    def provider_changes(self) -> Mapping[ProviderName, ProviderChanges]:
        """What each provider can change, by name (for help text and command checks)."""
        return {d.name: d.changes for d in self.descriptors}

    def kinds(self, name: ProviderName) -> frozenset[str]:
        """The change kinds that provider's plans carry."""
        return frozenset(self.descriptor(name).kinds)

    @property
    def all_kinds(self) -> frozenset[str]:
        """Every change kind of every provider."""
        return frozenset(kind for d in self.descriptors for kind in d.kinds)

    @property
    def size_limits(self) -> tuple[str, ...]:
        """The ``limits`` keys the providers count a size in (``max_gpus``, ``max_nodes``),
        once each, in the catalog's order."""
        return tuple(dict.fromkeys(d.size_limit for d in self.descriptors))
