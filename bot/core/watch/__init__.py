"""The watcher's chat-neutral logic (SPEC §7): health transitions, alert keys, reservation
reminder horizons and poll back-off. The loop, the lease and posting build on these."""
