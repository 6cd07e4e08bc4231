"""The watcher's pure logic: health transitions, alert keys, reminder horizons and what is
due, poll back-off, and the ``watch`` policy key."""

from __future__ import annotations

import asyncio
import inspect
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from bot.core.policy.watch import WatchConfig, parse_horizon, parse_horizons
from bot.core.watch.backoff import PollBackoff
from bot.core.watch.health import (
    GONE,
    ClusterHealth,
    Condition,
    EventKind,
    HealthEvent,
    is_healthy,
    observe,
)
from bot.core.watch.keys import incident_key, recovery_key, remediation_key, reminder_key
from bot.core.watch.remediations import _bounded_gather
from bot.core.watch.reminders import due, remaining_text
from bot.providers.base import ClusterSummary, ProviderName
from bot.providers.errors import (
    ProviderAuthError,
    ProviderRateLimited,
    ProviderServerError,
    ProviderTimeout,
)
from tests.support.catalog import CATALOG

STEADY_TOGETHER = {"Ready", "Degraded", "Paused", "OnDemandComputePaused"}


def _cluster(
    status: str, cluster_id: str = "tc-1", provider: ProviderName = "together"
) -> ClusterSummary:
    steady = status in STEADY_TOGETHER if provider == "together" else status == "Running"
    return ClusterSummary(
        provider=provider,
        project="p",
        cluster_id=cluster_id,
        name=cluster_id,
        status=status,
        steady=steady,
    )


def _run(
    statuses: list[str | None], changing: frozenset[str] = frozenset()
) -> tuple[dict[str, ClusterHealth], list[HealthEvent]]:
    """Poll a single cluster through ``statuses`` (None = not listed); every event."""
    memory: dict[str, ClusterHealth] = {}
    events: list[HealthEvent] = []
    for status in statuses:
        listed = [] if status is None else [_cluster(status)]
        memory, new = observe(memory, listed, changing, catalog=CATALOG)
        events.extend(new)
    return memory, events


# -- health --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("provider", "status", "healthy"),
    [
        ("together", "Ready", True),
        ("together", "Paused", True),
        ("together", "OnDemandComputePaused", True),
        ("together", "Degraded", False),
        ("together", "WaitingForDataPlaneNodes", False),
        ("e2e", "Running", True),
        ("e2e", "running ", True),
        ("e2e", "Failed", False),
    ],
)
def test_healthy_sets(provider: ProviderName, status: str, healthy: bool) -> None:
    assert is_healthy(CATALOG, provider, status) is healthy


def test_degraded_then_restored_is_one_incident_and_one_recovery() -> None:
    memory, events = _run(["Ready", "Ready", "Degraded", "Degraded", "Ready", "Ready"])
    assert [(e.kind, e.incident, e.status, e.previous_status) for e in events] == [
        (EventKind.OPENED, 1, "Degraded", "Ready"),
        (EventKind.RECOVERED, 1, "Ready", "Degraded"),
    ]
    assert memory["tc-1"] == ClusterHealth(
        cluster_id="tc-1",
        status="Ready",
        condition=Condition.HEALTHY,
        seen_healthy=True,
        incident=1,
        open=False,
    )


def test_a_second_incident_gets_the_next_number() -> None:
    _, events = _run(["Ready", "Degraded", "Ready", "Degraded"])
    assert [(e.kind, e.incident) for e in events] == [
        (EventKind.OPENED, 1),
        (EventKind.RECOVERED, 1),
        (EventKind.OPENED, 2),
    ]


def test_another_unhealthy_status_edits_the_open_incident() -> None:
    _, events = _run(["Ready", "Degraded", "Deleting", "Deleting"])
    assert [(e.kind, e.incident, e.status) for e in events] == [
        (EventKind.OPENED, 1, "Degraded"),
        (EventKind.CHANGED, 1, "Deleting"),
    ]


def test_provisioning_after_a_gpuops_change_is_not_unhealthy() -> None:
    statuses: list[str | None] = ["Ready", "WaitingForDataPlaneNodes", "InstallingDrivers", "Ready"]
    _, events = _run(statuses, changing=frozenset({"tc-1"}))
    assert events == []
    memory, _ = _run(statuses[:2], changing=frozenset({"tc-1"}))
    assert memory["tc-1"].condition is Condition.CHANGING


def test_provisioning_nobody_asked_gpuops_for_is_an_incident() -> None:
    _, events = _run(["Ready", "WaitingForDataPlaneNodes", "Ready"])
    assert [e.kind for e in events] == [EventKind.OPENED, EventKind.RECOVERED]


def test_degraded_during_a_gpuops_change_is_still_an_incident() -> None:
    _, events = _run(["Ready", "Degraded"], changing=frozenset({"tc-1"}))
    assert [e.kind for e in events] == [EventKind.OPENED]


def test_a_cluster_being_created_is_not_an_incident_until_it_was_healthy() -> None:
    _, events = _run(["WaitingForControlPlaneNodes", "InstallingDrivers", "Ready"])
    assert events == []


def test_a_cluster_unhealthy_at_first_sight_opens_an_incident() -> None:
    _, events = _run(["Degraded"])
    assert [(e.kind, e.previous_status) for e in events] == [(EventKind.OPENED, "")]


def test_disappearance_opens_once_and_a_return_recovers() -> None:
    memory, events = _run(["Ready", None, None, "Ready"])
    assert [(e.kind, e.status, e.summary is None) for e in events] == [
        (EventKind.OPENED, GONE, True),
        (EventKind.RECOVERED, "Ready", False),
    ]
    assert memory["tc-1"].open is False


def test_disappearing_during_an_incident_edits_it() -> None:
    memory, events = _run(["Ready", "Degraded", None, None])
    assert [(e.kind, e.incident, e.status) for e in events] == [
        (EventKind.OPENED, 1, "Degraded"),
        (EventKind.CHANGED, 1, GONE),
    ]
    assert memory["tc-1"].condition is Condition.GONE


def test_clusters_are_followed_independently() -> None:
    memory: dict[str, ClusterHealth] = {}
    memory, _ = observe(
        memory, [_cluster("Running", "1", "e2e"), _cluster("Running", "2", "e2e")], catalog=CATALOG
    )
    memory, events = observe(
        memory, [_cluster("Failed", "1", "e2e"), _cluster("Running", "2", "e2e")], catalog=CATALOG
    )
    assert [(e.cluster_id, e.kind) for e in events] == [("1", EventKind.OPENED)]
    restored = ClusterHealth.model_validate_json(memory["1"].model_dump_json())
    assert restored == memory["1"]


# -- keys ----------------------------------------------------------------------------------
def test_alert_keys_are_stable_and_cannot_collide() -> None:
    end = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
    assert remediation_key("together-prod", "rem-1") == "remediation:together-prod:rem-1"
    assert incident_key("together-prod", "tc-1", 3) == "health:together-prod:tc-1:3"
    assert recovery_key("together-prod", "tc-1", 3) == "health:together-prod:tc-1:3:recovered"
    assert (
        reminder_key("together-prod", "tc-1", end, "24h")
        == "reminder:together-prod:tc-1:2026-12-01T18:00:00Z:24h"
    )
    assert incident_key("a:b", "c", 1) != incident_key("a", "b:c", 1)
    later = end + timedelta(days=7)
    assert reminder_key("p", "c", end, "1h") != reminder_key("p", "c", later, "1h")


# -- reminders -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "before", "canonical"),
    [
        ("24h", timedelta(hours=24), "24h"),
        ("1h", timedelta(hours=1), "1h"),
        ("30m", timedelta(minutes=30), "30m"),
        (" 2D ", timedelta(days=2), "2d"),
    ],
)
def test_horizons_parse(text: str, before: timedelta, canonical: str) -> None:
    horizon = parse_horizon(text)
    assert (horizon.before, horizon.text) == (before, canonical)


@pytest.mark.parametrize("text", ["", "24", "h", "1.5h", "-1h", "0m", "10s", "1 hour"])
def test_bad_horizons_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="horizon"):
        parse_horizon(text)


def test_horizons_are_distinct_and_widest_first() -> None:
    assert [h.text for h in parse_horizons(["1h", "24h", "60m", "30m"])] == ["24h", "60m", "30m"]


def test_one_reminder_per_horizon_as_time_passes() -> None:
    end = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
    horizons = parse_horizons(["24h", "1h"])
    done: set[str] = set()
    posted: list[str] = []
    now = end - timedelta(hours=30)
    while now < end + timedelta(hours=1):
        result = due(end, now, horizons, done)
        if result.post is not None:
            posted.append(f"{result.post.text}@{(end - now).total_seconds() / 3600:g}")
            done.add(result.post.text)
        done.update(h.text for h in result.skip)
        now += timedelta(minutes=15)
    assert posted == ["24h@24", "1h@1"]


def test_a_late_start_posts_only_the_tightest_due_horizon() -> None:
    end = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
    result = due(end, end - timedelta(minutes=20), parse_horizons(["24h", "1h", "30m"]))
    assert result.post is not None and result.post.text == "30m"
    assert [h.text for h in result.skip] == ["24h", "1h"]
    assert due(end, end, parse_horizons(["1h"])).post is None
    assert due(end, end - timedelta(hours=2), parse_horizons(["1h"])).post is None


def test_a_horizon_wider_than_one_done_is_never_due() -> None:
    """A skipped horizon's claim has no ts, like a claim never posted: once a tighter one
    is done, the wider one is past for good even when the store no longer counts it."""
    end = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
    horizons = parse_horizons(["24h", "1h", "30m"])
    later = due(end, end - timedelta(minutes=20), horizons, done=["30m"])
    assert later.post is None and later.skip == ()
    tighter = due(end, end - timedelta(minutes=20), horizons, done=["1h"])
    assert tighter.post is not None and tighter.post.text == "30m" and tighter.skip == ()


@pytest.mark.parametrize(
    ("left", "text"),
    [
        (timedelta(hours=23, minutes=59), "in 23 h"),
        (timedelta(minutes=45), "in 45 min"),
        (timedelta(days=2, hours=3), "in 2 d 3 h"),
        (timedelta(days=1), "in 1 d"),
        (-timedelta(minutes=5), "in 0 min"),
    ],
)
def test_remaining_text(left: timedelta, text: str) -> None:
    now = datetime(2026, 11, 30, 18, 0, tzinfo=UTC)
    assert remaining_text(now + left, now) == text


# -- back-off ------------------------------------------------------------------------------
def _backoff(every: float = 60, cap: float = 900) -> PollBackoff:
    return PollBackoff(every_seconds=every, max_seconds=cap, rand=lambda: 0.5)


def test_success_polls_at_the_interval_with_jitter() -> None:
    assert _backoff().after_success() == 60
    spread = PollBackoff(every_seconds=60, rand=lambda: 1.0)
    assert spread.after_success() == pytest.approx(66)


def test_server_errors_double_the_wait_up_to_the_cap_and_success_resets() -> None:
    backoff = _backoff()
    error = ProviderServerError("boom", provider="together", status=503)
    waits = [backoff.after_error(error) for _ in range(6)]
    assert waits == [120, 240, 480, 900, 900, 900]
    timeout = ProviderTimeout("slow", provider="e2e")
    assert backoff.after_error(timeout) == 900
    assert backoff.after_success() == 60
    assert backoff.after_error(timeout) == 120


def test_rate_limits_honour_retry_after() -> None:
    backoff = _backoff()
    assert backoff.after_error(ProviderRateLimited("slow down", provider="e2e")) == 120
    assert backoff.after_error(
        ProviderRateLimited("slow down", provider="e2e", retry_after=400)
    ) == pytest.approx(400)
    assert backoff.after_error(
        ProviderRateLimited("slow down", provider="e2e", retry_after=3600)
    ) == pytest.approx(3600)


def test_errors_that_waiting_does_not_fix_keep_the_interval() -> None:
    backoff = _backoff()
    backoff.after_error(ProviderServerError("boom", provider="together", status=500))
    assert backoff.after_error(ProviderAuthError("no", provider="together", status=401)) == 60
    assert backoff.failures == 0


# -- the watch key -------------------------------------------------------------------------
def test_watch_config_defaults_and_limits() -> None:
    config = WatchConfig()
    assert (config.every_seconds, config.status, config.remediations) == (60, True, True)
    assert [h.text for h in config.horizons] == ["24h", "1h"]
    assert WatchConfig(reservation_reminders=["30m", "2h"]).reservation_reminders == ("2h", "30m")
    for bad in ({"every_seconds": 5}, {"reservation_reminders": ["soon"]}, {"poll": 60}):
        with pytest.raises(ValidationError):
            WatchConfig.model_validate(bad)


async def test_a_bounded_gather_cancelled_closes_the_calls_that_never_ran() -> None:
    """A poll cancelled (shutdown, lease lost) while listings wait their turn: the waiting
    calls are closed, not left to warn "coroutine ... was never awaited"."""
    started = asyncio.Event()

    async def listing(n: int) -> int:
        started.set()
        await asyncio.sleep(3600)
        return n

    calls = [listing(n) for n in range(3)]
    poll = asyncio.ensure_future(_bounded_gather(calls, 1))
    await started.wait()
    poll.cancel()
    with pytest.raises(asyncio.CancelledError):
        await poll
    assert {inspect.getcoroutinestate(call) for call in calls} == {inspect.CORO_CLOSED}


async def test_a_bounded_gather_runs_at_most_limit_calls_at_once() -> None:
    running = 0
    most = 0

    async def listing(n: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0)
        running -= 1
        return n

    assert await _bounded_gather([listing(n) for n in range(10)], 3) == list(range(10))
    assert most == 3
