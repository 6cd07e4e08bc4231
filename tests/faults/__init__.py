"""Fault tests: provider and Slack fault matrices, fuzzing, leak scan."""
