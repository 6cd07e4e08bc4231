"""tests.unit."""
