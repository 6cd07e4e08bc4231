"""What each desk of the watcher holds (incidents, reminders, remediations and their clicks):
the access it checks and audits through, the watcher's store, the notifier it posts through,
and its backlog of store writes owed."""

from __future__ import annotations

from bot.core.access import Access
from bot.core.store.watch import WatchStore
from bot.core.watch.backlog import StoreBacklog
from bot.core.watch.notifier import WatchNotifier


class WatchDesk:
    """One desk of the watcher. ``backlog``: the writes the store missed, made before the
    next poll (a claim left without where its message went would be taken over and posted
    again); a desk's parts share one."""

    def __init__(
        self,
        *,
        access: Access,
        store: WatchStore,
        notifier: WatchNotifier,
        backlog: StoreBacklog | None = None,
    ) -> None:
        self.access = access
        self.store = store
        self.notifier = notifier
        self.backlog = StoreBacklog() if backlog is None else backlog

    def _title(self, project: str) -> str:
        """How people name the project's provider (its descriptor's title)."""
        return self.access.policy.provider_title(project)
