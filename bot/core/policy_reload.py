"""Reading the policy file again (SPEC §8 reload): on SIGHUP and when its content changes.

A valid new policy replaces the old one everywhere it is read; an invalid one is refused,
logged with the offending key and counted, and the old policy stays in force. Each log line
names a short hash of the policy in force."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal

from bot.core.policy import Policy, PolicyError, load_policy
from bot.errors import GpuopsError
from bot.metrics import POLICY_RELOADS

log = logging.getLogger(__name__)

ReloadResult = Literal["reloaded", "unchanged", "invalid"]
CHECK_EVERY_SECONDS = 10.0  # how often the file is looked at (SPEC: at least every 30 s)


class PolicyRejected(GpuopsError, ValueError):
    """A policy that parses but cannot be put in force (e.g. a credential it names is unset)."""


def policy_hash(content: bytes) -> str:
    """A short hash of the policy file's bytes, for logs."""
    return hashlib.sha256(content).hexdigest()[:12]


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


class PolicyReloader:
    """Reloads ``path`` into ``apply`` (which may raise PolicyRejected) when asked or when
    the file's content changes."""

    def __init__(
        self,
        path: Path,
        apply: Callable[[Policy], None],
        after: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self.path = path
        self.apply = apply
        self.after = after  # once a new policy is in force (its failure is logged, not raised)
        content = _read(path) or b""
        self.in_force = policy_hash(content)  # the hash of the policy in force
        self._seen = self.in_force  # the last content looked at, valid or not
        self._lock = asyncio.Lock()
        log.info("policy %s in force (hash %s)", path, self.in_force)

    async def reload(self) -> ReloadResult:
        """Read the file now; what came of it."""
        async with self._lock:
            result = self._reload()
            if result == "reloaded" and self.after is not None:
                try:
                    await self.after()
                except Exception:  # the new policy is in force all the same
                    log.exception("after the policy reload")
            return result

    def _reload(self) -> ReloadResult:
        content = _read(self.path)
        digest = policy_hash(content or b"")
        self._seen = digest
        if digest == self.in_force:
            POLICY_RELOADS.labels("unchanged").inc()
            return "unchanged"
        try:
            policy = load_policy(self.path)
            self.apply(policy)
        except (PolicyError, PolicyRejected) as exc:
            POLICY_RELOADS.labels("invalid").inc()
            problems = exc.problems if isinstance(exc, PolicyError) else [str(exc)]
            log.error(
                "policy %s (hash %s) refused; policy %s stays in force: %s",
                self.path,
                digest,
                self.in_force,
                "; ".join(problems),
            )
            return "invalid"
        POLICY_RELOADS.labels("reloaded").inc()
        log.warning(
            "policy %s reloaded: hash %s in force (was %s)", self.path, digest, self.in_force
        )
        self.in_force = digest
        return "reloaded"

    async def watch_forever(self, every: float = CHECK_EVERY_SECONDS) -> None:
        """Reload whenever the file's content differs from what was last looked at (a
        ConfigMap update replaces the file; an invalid one is reported once)."""
        while True:
            await asyncio.sleep(every)
            content = _read(self.path)
            if content is not None and policy_hash(content) != self._seen:
                await self.reload()
