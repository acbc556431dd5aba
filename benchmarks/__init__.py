"""Benchmarks: ``python -m benchmarks.<name>`` from any directory (README "Benchmarks")."""

import ayo  # noqa: F401  first, so the checkout's folders never shadow installed packages
