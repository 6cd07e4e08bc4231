"""tests.contract."""
