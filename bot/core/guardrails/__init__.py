"""Fleet guardrails (SPEC §8): limits, prices, approval rules and change freezes."""
