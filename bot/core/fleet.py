"""One fleet snapshot per project, shared by ``/gpu list``, App Home and the watcher.

Neither provider pages its cluster list (Together's API has no paging), so every list page
and every Home publish used to fetch and parse the whole fleet. Here the fleet of a project
is fetched once and kept: the watcher's poll refreshes it every interval, a reader takes it
as it is while it is younger than the project's interval (the watch interval of a watched
project, ``DEFAULT_MAX_AGE`` otherwise) and fetches it anew when it is older, so what is
shown is never older than that. Concurrent readers of a stale snapshot wait on one fetch.
A change sent to a cluster forgets its project's snapshot: the next reader sees the change.
Each answer says how old its snapshot is (``as of 40 s ago``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from bot.providers.base import ClusterSummary, ProviderAdapter

# How old a snapshot of a project nobody watches may be when shown: the policy's shortest
# watch interval, so a listing is as fresh as a watched project's at its quickest.
DEFAULT_MAX_AGE = 15.0
# An answer from a snapshot at least this old says its age; a younger one reads as live.
SAY_AGE_FROM = 5.0


@dataclass(frozen=True)
class FleetView:
    """A project's clusters as one fetch returned them, and when (``time.monotonic()``)."""

    clusters: tuple[ClusterSummary, ...]
    fetched_at: float

    def age(self, now: float | None = None) -> float:
        """Seconds since the fetch."""
        return max(0.0, (time.monotonic() if now is None else now) - self.fetched_at)


class FleetSnapshots:
    """The latest fleet of each project (see the module docstring)."""

    def __init__(
        self,
        adapter_for: Callable[[str], ProviderAdapter],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.adapter_for = adapter_for
        self.clock = clock
        self._views: dict[str, FleetView] = {}
        self._fetching: dict[str, asyncio.Future[FleetView]] = {}
        self._intervals: dict[str, float] = {}
        self.fetches = 0  # provider list calls made (tests and the bench read it)

    def watched(self, project: str, every_seconds: float) -> None:
        """The watcher polls ``project`` every ``every_seconds``: its snapshot's bound."""
        self._intervals[project] = every_seconds

    def age(self, view: FleetView) -> float:
        """How old ``view`` is now, by this store's clock."""
        return view.age(self.clock())

    def max_age(self, project: str) -> float:
        return self._intervals.get(project, DEFAULT_MAX_AGE)

    def forget(self, project: str) -> None:
        """A change went out to one of the project's clusters: the next reader fetches."""
        self._views.pop(project, None)

    async def get(self, project: str) -> FleetView:
        """The project's snapshot, fetched first when there is none younger than its bound."""
        view = self._views.get(project)
        if view is not None and view.age(self.clock()) < self.max_age(project):
            return view
        return await self.refresh(project)

    async def refresh(self, project: str) -> FleetView:
        """Fetch the project's fleet now (the watcher's poll); a fetch already under way is
        shared, not repeated. Provider errors propagate to every waiter."""
        running = self._fetching.get(project)
        if running is not None:
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if running.cancelled() and task is not None and not task.cancelling():
                    return await self.refresh(project)  # its fetcher was cancelled, not us
                raise
        future: asyncio.Future[FleetView] = asyncio.get_running_loop().create_future()
        self._fetching[project] = future
        try:
            started = self.clock()
            self.fetches += 1
            clusters = await self.adapter_for(project).list_clusters()
            view = FleetView(tuple(clusters), started)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here: no "never retrieved" when nobody waits
            raise
        finally:
            self._fetching.pop(project, None)
        self._views[project] = view
        future.set_result(view)
        return view


def age_text(seconds: float | None) -> str | None:
    """``as of 40 s ago`` (``as of 3 min ago``) for an answer from a snapshot at least
    ``SAY_AGE_FROM`` old; None for a live one."""
    if seconds is None or seconds < SAY_AGE_FROM:
        return None
    if seconds < 120:
        return f"as of {seconds:.0f} s ago"
    return f"as of {seconds / 60:.0f} min ago"
