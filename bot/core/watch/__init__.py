"""The watcher (SPEC §7): the loop that holds the watch lease and polls (watcher), what it
posts (remediations, incidents, reservations) through the WatchNotifier port (notifier),
and the pure parts they build on (health, keys, reminders, backoff, config)."""
