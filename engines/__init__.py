"""Ayo package (filled in by later work)."""
