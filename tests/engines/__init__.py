"""Tests of ayo.engines."""
