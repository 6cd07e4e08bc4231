"""A policy file is taken only whole (SPEC §8 reload): the section-loss rule (a key absent
is a loss, the key present empty is a removal), and the reloader's settling (a file written
in two parts is read once, whole) and refusals (the old policy stays; log, metric, notice)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import cast

import pytest
import yaml

from bot.core.policy import Policy, PolicyHolder
from bot.core.policy.notices import tell_kept
from bot.core.policy.reload import PolicyKept, PolicyReloader
from bot.core.policy.sections import lost_sections, where_lost
from bot.core.store import Store, StoreUnavailable
from bot.local.demo.stack import DEMO_POLICY
from bot.metrics import REGISTRY
from tests.support.catalog import parse_policy
from tests.support.core_notifier import RecordingNotifier
from tests.support.guard_kit import guard_policy

FREEZE = (
    "  - name: year-end\n    projects: [together-prod]\n"
    '    from: "2026-12-24T00:00:00Z"\n    to: "2027-01-02T00:00:00Z"\n'
)
FULL = guard_policy(FREEZE)
RULES_CUT = FULL[: FULL.index("  rules:\n")]  # the first part of a write: no rules, no freezes


def policy(text: str) -> Policy:
    return parse_policy(text, Path("policy.yml"))


def without(text: str, section: str) -> str:
    data = yaml.safe_load(text)
    parts = section.split(".")
    holder = data
    for part in parts[:-1]:
        holder = holder[part]
    del holder[parts[-1]]
    return yaml.safe_dump(data)


def emptied(text: str, section: str, empty: object) -> str:
    data = yaml.safe_load(text)
    parts = section.split(".")
    holder = data
    for part in parts[:-1]:
        holder = holder[part]
    holder[parts[-1]] = empty
    return yaml.safe_dump(data)


@pytest.mark.parametrize(
    ("section", "empty"),
    [
        ("grants", []),
        ("freezes", []),
        ("approvals", {}),
        ("approvals.rules", []),
        ("projects.together-prod.limits", None),
        ("projects.together-prod.limits.max_hourly_increase", None),
        ("projects.together-prod.prices", None),
        ("projects.e2e-delhi.limits", None),
    ],
)
def test_a_section_absent_is_lost_and_present_empty_is_removed(section: str, empty: object) -> None:
    in_force = policy(FULL)
    assert lost_sections(in_force, policy(without(FULL, section))) == [section]
    assert lost_sections(in_force, policy(emptied(FULL, section, empty))) == []


def test_the_first_part_of_a_write_loses_the_rules_and_the_freezes() -> None:
    assert lost_sections(policy(FULL), policy(RULES_CUT)) == ["approvals.rules", "freezes"]
    # what they concern: the projects the rules and the freeze name
    assert where_lost(policy(FULL), "freezes") == ["together-prod"]
    assert where_lost(policy(FULL), "approvals.rules") == ["e2e-delhi", "together-prod"]


def test_nothing_is_lost_that_the_policy_in_force_does_not_have() -> None:
    assert lost_sections(policy(DEMO_POLICY), policy(FULL)) == []
    assert lost_sections(policy(FULL), policy(FULL)) == []
    # a project removed takes its sections with it (the project itself is not a section)
    bare = DEMO_POLICY.replace("approvals:\n  expire_after_minutes: 30\n  break_glass: true\n", "")
    assert lost_sections(policy(DEMO_POLICY), policy(bare)) == ["approvals"]


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class SteppedSleep:
    """The reloader's waits, each released by the test: ``waits`` records who waits."""

    def __init__(self) -> None:
        self.waits: asyncio.Queue[tuple[float, asyncio.Event]] = asyncio.Queue()

    async def __call__(self, seconds: float) -> None:
        done = asyncio.Event()
        await self.waits.put((seconds, done))
        await done.wait()

    async def next(self, seconds: float) -> asyncio.Event:
        got, done = await asyncio.wait_for(self.waits.get(), 10)
        assert got == seconds
        return done


class Reloaded:
    def __init__(self) -> None:
        self.applied: list[Policy] = []
        self.kept: list[PolicyKept] = []

    def apply(self, new: Policy) -> None:
        self.applied.append(new)

    async def tell(self, kept: PolicyKept) -> None:
        self.kept.append(kept)


def reloader(path: Path, seen: Reloaded, sleep: SteppedSleep) -> PolicyReloader:
    return PolicyReloader(
        path,
        seen.apply,
        PolicyHolder(policy(path.read_text())),
        kept=seen.tell,
        quiet_seconds=2,
        sleep=sleep,
    )


async def test_a_file_written_in_two_parts_is_read_once_whole(tmp_path: Path) -> None:
    path = tmp_path / "policy.yml"
    path.write_text(FULL)
    seen, sleep = Reloaded(), SteppedSleep()
    watcher = reloader(path, seen, sleep)
    watch = asyncio.create_task(watcher.watch_forever(every=10))
    try:
        newer = FULL.replace("  expire_after_minutes: 30\n", "  expire_after_minutes: 45\n")
        with path.open("w") as out:
            out.write(newer[: newer.index("  rules:\n")])  # the first part, flushed
            out.flush()
            (await sleep.next(10)).set()  # the watch looks: changed
            quiet = await sleep.next(2)  # and waits for it to settle
            out.write(newer[newer.index("  rules:\n") :])  # the second part, meanwhile
        quiet.set()
        (await sleep.next(2)).set()  # it changed during the wait: another quiet period
        await sleep.next(10)  # back to watching: the whole file was judged
        assert [p.approvals.expire_after_minutes for p in seen.applied] == [45]
        assert len(seen.applied[0].approvals.rules) == 2 and seen.kept == []
        assert [o.result for o in watcher.outcomes] == ["reloaded"]
    finally:
        watch.cancel()


async def test_a_settled_file_that_drops_a_section_is_refused_and_told(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.yml"
    path.write_text(FULL)
    seen, sleep = Reloaded(), SteppedSleep()
    watcher = reloader(path, seen, sleep)
    before = metric("gpuops_policy_kept_total", reason="section_lost")
    watch = asyncio.create_task(watcher.watch_forever(every=10))
    try:
        path.write_text(RULES_CUT)
        (await sleep.next(10)).set()
        with caplog.at_level(logging.ERROR, logger="bot.core.policy.reload"):
            (await sleep.next(2)).set()  # settled: the same file after the quiet period
            await sleep.next(10)
    finally:
        watch.cancel()
    assert seen.applied == [] and watcher.policy.approvals.rules  # the old policy stays
    [kept] = seen.kept
    assert kept.reason == "section_lost" and kept.channels == ("C0GPUAUDIT",)
    assert kept.projects == ("e2e-delhi", "together-prod")
    assert (
        kept.problems[0].startswith("approvals.rules: absent") and "rules: []" in kept.problems[0]
    )
    [line] = [r for r in caplog.records if r.name == "bot.core.policy.reload"]
    assert "refused (section_lost)" in line.getMessage() and "\n" not in line.getMessage()
    assert line.exc_info is None
    assert metric("gpuops_policy_kept_total", reason="section_lost") == before + 1
    assert metric("gpuops_policy_file_refused", reason="section_lost") == 1
    # The same file looked at again (SIGHUP) is refused again; once whole, it is taken.
    path.write_text(FULL.replace("freezes:\n", "freezes: []\nunused:\n")[: -len(FREEZE)])
    assert await watcher.reload() == "invalid"  # an unknown key: not a valid policy
    assert watcher.outcomes[-1].reason == "invalid"
    path.write_text(FULL[: -len(FREEZE)].replace("freezes:\n", "freezes: []\n"))
    assert await watcher.reload() == "reloaded"  # the freeze removed by saying so
    assert metric("gpuops_policy_file_refused", reason="section_lost") == 0


async def test_a_configmap_symlink_swap_is_followed(tmp_path: Path) -> None:
    """A ConfigMap volume: policy.yml -> ..data/policy.yml, ..data -> a version directory;
    an update swaps ..data to a new directory in one rename, and the new file is taken."""
    for version, text in (("..v1", FULL), ("..v2", FULL.replace("approvers: 2", "approvers: 3"))):
        (tmp_path / version).mkdir()
        (tmp_path / version / "policy.yml").write_text(text)
    (tmp_path / "..data").symlink_to("..v1")
    path = tmp_path / "policy.yml"
    path.symlink_to("..data/policy.yml")
    seen, sleep = Reloaded(), SteppedSleep()
    watcher = reloader(path, seen, sleep)
    watch = asyncio.create_task(watcher.watch_forever(every=10))
    try:
        (tmp_path / "..data_tmp").symlink_to("..v2")
        (tmp_path / "..data_tmp").replace(tmp_path / "..data")  # the kubelet's swap
        (await sleep.next(10)).set()
        (await sleep.next(2)).set()
        await sleep.next(10)
    finally:
        watch.cancel()
    [taken] = seen.applied
    assert [r.approvers for r in taken.approvals.rules] == [3, 1] and seen.kept == []


class Deliveries:
    """The store's delivery keys: new once; ``down`` makes it unreachable."""

    def __init__(self, *, down: bool = False) -> None:
        self.keys: set[str] = set()
        self.down = down

    async def remember_delivery(self, key: str) -> bool:
        if self.down:
            raise StoreUnavailable("gpuops", "connection refused")
        new = key not in self.keys
        self.keys.add(key)
        return new


async def test_a_refused_file_is_told_once_per_channel_and_told_with_the_store_down() -> None:
    kept = PolicyKept(
        path=Path("/etc/gpuops/policy.yml"),
        digest="abc",
        in_force="def",
        reason="section_lost",
        problems=("approvals.rules: absent",),
        projects=("e2e-delhi", "together-prod"),
        channels=("C0GPUAUDIT", "C0OTHER"),
    )
    notifier = RecordingNotifier()
    store = Deliveries()
    assert await tell_kept(cast(Store, store), notifier, kept) == 2
    assert await tell_kept(cast(Store, store), notifier, kept) == 0  # the other replica
    assert [c for c, _ in notifier.policy_notes] == ["C0GPUAUDIT", "C0OTHER"]
    text = notifier.policy_notes[0][1]
    assert "policy.yml (hash abc) was not taken" in text and "(hash def) stays" in text
    # Better twice than never: with the store down each channel is told all the same.
    assert await tell_kept(cast(Store, Deliveries(down=True)), notifier, kept) == 2
