"""Thin Slack adapters: one module per surface, each exposing register(app)."""
