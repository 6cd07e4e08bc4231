"""Fault injection for local tests and demos: a TCP proxy that can refuse, drop, hang or slow."""
