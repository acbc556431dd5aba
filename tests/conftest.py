"""Imported by pytest before any test module."""

import ayo  # noqa: F401  first, so the checkout's folders never shadow installed packages
