"""How each /gpu command is written (SPEC §4.1), for its usage lines and errors: gpuops's
own commands, and each provider's change verb from its descriptor."""

from __future__ import annotations

from bot.providers.catalog import Catalog
from bot.providers.descriptor import ProviderDescriptor


def change_usage(provider: ProviderDescriptor) -> str:
    """``/gpu update <project> <cluster_id> [field=value …] [reason="…"]``."""
    action = "" if provider.single_action() else " [<action>]"
    return f'/gpu {provider.verb} <project> <cluster_id>{action} [field=value …] [reason="…"]'


# The usage of gpuops's own commands; a provider's change verb comes from its descriptor.
USAGE = {
    "help": "/gpu help",
    "list": "/gpu list [project] [page=N]",
    "show": "/gpu show <project> <cluster_id>",
    "audit": "/gpu audit [project] [limit] [page=N]",
    "timeline": "/gpu timeline [since]",
    "policy": "/gpu policy [project]",
    "token": "/gpu token new [ttl=7d] [name=…]",
    "spend": "/gpu spend [project|team] [month=YYYY-MM]",
}
_BEFORE_THE_VERBS = ("help", "list", "show")


def usage(catalog: Catalog) -> dict[str, str]:
    """Every command's usage by its word: gpuops's own, with each provider's change verb of
    ``catalog`` after ``show``."""
    words = {w: u for w, u in USAGE.items() if w in _BEFORE_THE_VERBS}
    words.update((d.verb, change_usage(d)) for d in catalog)
    words.update((w, u) for w, u in USAGE.items() if w not in _BEFORE_THE_VERBS)
    return words
