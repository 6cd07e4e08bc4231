"""Telling the notify channels that a policy file was refused (SPEC §8 reload): each channel
of the projects it concerns hears it once per file, across replicas (the store's delivery
keys say which replica tells)."""

from __future__ import annotations

import logging

from bot.core.notifier import Notifier
from bot.core.policy.reload import PolicyKept
from bot.core.store import Store
from bot.core.store.errors import StoreUnavailable

log = logging.getLogger(__name__)

_WHY = {
    "unreadable": "it cannot be read",
    "invalid": "it is not a valid policy",
    "rejected": "it cannot be served",
    "section_lost": "it drops what the policy in force has without saying so",
}


def kept_text(kept: PolicyKept) -> str:
    """What the channel is told: which file, why, and which policy stays."""
    return (
        f"The policy file {kept.path.name} (hash {kept.digest}) was not taken: "
        f"{_WHY[kept.reason]}: {'; '.join(kept.problems)}. The policy in force "
        f"(hash {kept.in_force}) stays for {', '.join(kept.projects)}."
    )


async def tell_kept(store: Store, notifier: Notifier, kept: PolicyKept) -> int:
    """Tell each notify channel of ``kept`` that no replica told of this file yet; how many
    were told. With the store down a channel is told all the same (twice at worst)."""
    told = 0
    for channel in kept.channels:
        key = f"gpuops:policy-kept:{kept.digest}:{kept.in_force}:{channel}"
        try:
            first = await store.remember_delivery(key)
        except StoreUnavailable as exc:
            log.warning("policy notice to %s not deduplicated: %s", channel, exc)
            first = True
        if first:
            await notifier.policy_kept(channel, kept_text(kept))
            told += 1
    return told
