"""Helpers shared by the tests: driving the local stack, kits per provider, spec loading."""
