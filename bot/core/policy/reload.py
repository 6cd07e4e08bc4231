"""Reading the policy file again (SPEC §8 reload): on SIGHUP and when its content changes.

A policy file is taken only whole: a change is read once it has settled (two reads a quiet
period apart find the same file, no write between them), it must parse and validate, and it
must not drop a section the policy in force has unless it says so (bot.core.policy.sections).
Otherwise it is refused: the old policy stays in force, one log line and ``/metrics`` say
why, and ``kept`` is told (the notify channels of the projects it concerns hear it). Each
log line names a short hash of the policy in force. SIGHUP is the operator saying the file
is complete: it is read at once, and checked the same way."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from bot.core.policy.holder import PolicyHolder
from bot.core.policy.loading import PolicyError, parse_policy
from bot.core.policy.model import Policy
from bot.core.policy.sections import lost_sections, where_lost
from bot.errors import GpuopsError
from bot.metrics import POLICY_FILE_REFUSED, POLICY_KEPT, POLICY_RELOADS

log = logging.getLogger(__name__)

ReloadResult = Literal["reloaded", "unchanged", "invalid"]
# Why a file was refused: not readable, not a valid policy, not servable (e.g. a credential
# it names is unset), or it drops a section the policy in force has.
KeptReason = Literal["unreadable", "invalid", "rejected", "section_lost"]
CHECK_EVERY_SECONDS = 10.0  # how often the file is looked at (SPEC: at least every 30 s)
QUIET_SECONDS = 2.0  # a changed file is read once it has had no write for this long
OUTCOMES_KEPT = 50  # the last outcomes remembered (what came of the latest looks)
# How to say "remove it" for a section whose key is absent.
_EMPTY = {"grants": "[]", "freezes": "[]", "rules": "[]", "approvals": "{}"}


class PolicyRejected(GpuopsError, ValueError):
    """A policy that parses but cannot be put in force (e.g. a credential it names is unset)."""


@dataclass(frozen=True)
class PolicyKept:
    """A policy file refused: the policy in force stays; who should hear of it."""

    path: Path
    digest: str  # the refused file's hash
    in_force: str  # the hash of the policy that stays
    reason: KeptReason
    problems: tuple[str, ...]
    projects: tuple[str, ...]  # the projects of the policy in force it concerns
    channels: tuple[str, ...]  # their notify channels


@dataclass(frozen=True)
class ReloadOutcome:
    """What came of looking at the file once."""

    result: ReloadResult
    digest: str
    reason: KeptReason | None = None


def policy_hash(content: bytes) -> str:
    """A short hash of the policy file's bytes, for logs."""
    return hashlib.sha256(content).hexdigest()[:12]


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


@dataclass(frozen=True)
class _Snapshot:
    """The file as one look saw it (through symlinks: a ConfigMap's ``..data`` swap)."""

    inode: int
    size: int
    mtime_ns: int
    content: bytes


def _snapshot(path: Path) -> _Snapshot | None:
    try:
        before = os.stat(path)
        content = path.read_bytes()
        after = os.stat(path)
    except OSError:
        return None
    if (before.st_ino, before.st_mtime_ns) != (after.st_ino, after.st_mtime_ns):
        return None  # written while it was read
    return _Snapshot(after.st_ino, after.st_size, after.st_mtime_ns, content)


def _removal_hint(key: str) -> str:
    """``approvals.rules: absent, and the policy in force has it (to remove it, write
    rules: [])``."""
    last = key.rsplit(".", 1)[-1]
    removal = f"{last}: {_EMPTY.get(last, 'null')}"
    return f"{key}: absent, and the policy in force has it (to remove it, write {removal})"


class PolicyReloader:
    """Reloads ``path`` into ``holder`` when asked or when the file's content changes and
    settles: ``apply`` readies a valid new policy (it may raise PolicyRejected), then the
    holder swaps it in; ``kept`` hears of each file refused."""

    def __init__(
        self,
        path: Path,
        apply: Callable[[Policy], None],
        holder: PolicyHolder,
        *,
        after: Callable[[], Awaitable[object]] | None = None,
        kept: Callable[[PolicyKept], Awaitable[object]] | None = None,
        quiet_seconds: float = QUIET_SECONDS,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.path = path
        self.apply = apply
        self.holder = holder  # the policy in force (what a new file must not silently drop)
        self.after = after  # once a new policy is in force (its failure is logged, not raised)
        self.kept = kept  # once a file is refused (its failure is logged, not raised)
        self.quiet_seconds = quiet_seconds
        self._sleep = sleep  # the waits of the watch (tests step them)
        content = _read(path) or b""
        self.in_force = policy_hash(content)  # the hash of the policy in force
        self._seen = self.in_force  # the last content looked at, valid or not
        self._lock = asyncio.Lock()
        self.outcomes: deque[ReloadOutcome] = deque(maxlen=OUTCOMES_KEPT)
        log.info("policy %s in force (hash %s)", path, self.in_force)

    @property
    def policy(self) -> Policy:
        """The policy in force (the holder's)."""
        return self.holder.current

    async def reload(self) -> ReloadResult:
        """Read the file now (SIGHUP); what came of it."""
        return await self._take(_read(self.path))

    async def _take(self, content: bytes | None) -> ReloadResult:
        async with self._lock:
            outcome, refused = self._judge(content)
            if outcome.result == "reloaded" and self.after is not None:
                await _quietly("after the policy reload", self.after())
            if refused is not None and self.kept is not None:
                await _quietly("telling of the refused policy", self.kept(refused))
            self.outcomes.append(outcome)  # once all of it is done (tests wait on it)
            return outcome.result

    def _judge(self, content: bytes | None) -> tuple[ReloadOutcome, PolicyKept | None]:
        digest = policy_hash(content or b"")
        self._seen = digest
        if digest == self.in_force:
            POLICY_RELOADS.labels("unchanged").inc()
            _refused_now(None)
            return ReloadOutcome("unchanged", digest), None
        try:
            policy = self._whole(content)
            self.apply(policy)
        except _Refused as exc:
            refused = self._refuse(digest, exc.reason, exc.problems, exc.projects)
            return ReloadOutcome("invalid", digest, exc.reason), refused
        except PolicyRejected as exc:
            refused = self._refuse(digest, "rejected", [str(exc)], sorted(self.policy.projects))
            return ReloadOutcome("invalid", digest, "rejected"), refused
        POLICY_RELOADS.labels("reloaded").inc()
        _refused_now(None)
        log.warning(
            "policy %s reloaded: hash %s in force (was %s)", self.path, digest, self.in_force
        )
        self.in_force = digest
        self.holder.swap(policy)
        return ReloadOutcome("reloaded", digest), None

    def _whole(self, content: bytes | None) -> Policy:
        """The policy the file holds, if it is whole; else _Refused says why."""
        every = sorted(self.policy.projects)
        if content is None:
            raise _Refused("unreadable", [f"{self.path}: cannot read the policy file"], every)
        try:
            policy = parse_policy(content.decode("utf-8"), self.path, self.holder.catalog)
        except UnicodeDecodeError:
            raise _Refused("invalid", [f"{self.path}: not UTF-8 text"], every) from None
        except PolicyError as exc:
            raise _Refused("invalid", exc.problems, every) from None
        lost = lost_sections(self.policy, policy)
        if lost:
            projects = sorted({p for key in lost for p in where_lost(self.policy, key)})
            raise _Refused("section_lost", [_removal_hint(key) for key in lost], projects)
        return policy

    def _refuse(
        self, digest: str, reason: KeptReason, problems: Iterable[str], projects: Iterable[str]
    ) -> PolicyKept:
        said = tuple(problems)
        POLICY_RELOADS.labels("invalid").inc()
        POLICY_KEPT.labels(reason).inc()
        _refused_now(reason)
        log.error(
            "policy %s (hash %s) refused (%s); policy %s stays in force: %s",
            self.path,
            digest,
            reason,
            self.in_force,
            "; ".join(" ".join(p.split()) for p in said),  # one line
        )
        concerned = tuple(projects)
        channels = {self.policy.projects[p].notify_channel for p in concerned}
        return PolicyKept(
            path=self.path,
            digest=digest,
            in_force=self.in_force,
            reason=reason,
            problems=said,
            projects=concerned,
            channels=tuple(sorted(c for c in channels if c is not None)),
        )

    async def settled(self) -> bytes:
        """The file's content once two looks ``quiet_seconds`` apart find it the same (same
        bytes, inode, size and modification time: nothing was written between them)."""
        before = _snapshot(self.path)
        while True:
            await self._sleep(self.quiet_seconds)
            now = _snapshot(self.path)
            if now is not None and now == before:
                return now.content
            before = now

    async def watch_forever(self, every: float = CHECK_EVERY_SECONDS) -> None:
        """Reload whenever the file's content differs from what was last looked at, once
        it has settled (a ConfigMap update swaps the file; a refused one is told once)."""
        while True:
            await self._sleep(every)
            content = _read(self.path)
            if content is not None and policy_hash(content) != self._seen:
                await self._take(await self.settled())


class _Refused(GpuopsError):
    """The file on disk is not taken as the policy, and why."""

    def __init__(self, reason: KeptReason, problems: list[str], projects: list[str]) -> None:
        self.reason: KeptReason = reason
        self.problems = problems
        self.projects = projects
        super().__init__(reason)


def _refused_now(reason: KeptReason | None) -> None:
    """The gauge: 1 for the reason the file on disk is refused now, 0 for the others."""
    for each in get_args(KeptReason):
        POLICY_FILE_REFUSED.labels(each).set(1 if each == reason else 0)


async def _quietly(what: str, work: Awaitable[object]) -> None:
    try:
        await work
    except Exception as exc:  # the policy in force is decided all the same
        log.warning("%s failed: %r", what, exc)
