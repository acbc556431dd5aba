"""Deterministic fake engines (tests, ``App.fake``) and simulated engines on a virtual clock
(``benchmarks.scheduler``'s policy comparisons)."""
