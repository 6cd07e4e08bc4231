"""Slack listeners: one module per surface, each exposing register(app)."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from handlers import actions, commands, mentions, modals


def register_all(app: AsyncApp) -> None:
    """Register every surface's listeners on ``app``."""
    for surface in (commands, actions, modals, mentions):
        surface.register(app)
