"""Spend (SPEC §13): the usage ledger fed by the watcher, months and projections, budgets
and team quotas judged like every guardrail, ``/gpu spend`` and the weekly digest."""
