"""Core tests on the fast core harness (tests/support/core_harness.py): no HTTP."""
