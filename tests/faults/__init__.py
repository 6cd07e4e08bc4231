"""tests.faults."""
