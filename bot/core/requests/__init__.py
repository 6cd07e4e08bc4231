"""Change requests: open, decide, execute, follow up, sweep (see workflow.py)."""
