"""Slack listeners: one module per surface, each exposing register(app)."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from handlers import actions, builder_steps, commands, home, mentions, modals, watch


def register_all(app: AsyncApp) -> None:
    """Register every surface's listeners on ``app``."""
    # home before actions: its decision buttons share action ids with the message buttons.
    for surface in (commands, home, actions, modals, mentions, watch, builder_steps):
        surface.register(app)
