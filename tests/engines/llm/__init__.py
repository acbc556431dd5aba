"""Tests of ayo.engines.llm."""
