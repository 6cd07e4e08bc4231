"""Staged scale (SPEC §14): one approved change sent in steps, each step proven steady and
healthy, and held for its soak, before the next (``plan``: the steps and their prices)."""
