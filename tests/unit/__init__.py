"""Unit tests of pure logic: parsing, policy, rules, rendering."""
