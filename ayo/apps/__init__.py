"""The built-in application templates, by name."""

from __future__ import annotations

from .agent_rag import AGENT_RAG
from .base import AppTemplate
from .contextual_rag import CONTEXTUAL_RAG
from .rag import ADVANCED_RAG, NAIVE_RAG
from .search_gen import SEARCH_GEN

APPS: dict[str, AppTemplate] = {
    a.name: a for a in (NAIVE_RAG, ADVANCED_RAG, SEARCH_GEN, CONTEXTUAL_RAG, AGENT_RAG)
}


def get_app(name: str) -> AppTemplate:
    """The built-in app called ``name``; KeyError lists the known names."""
    try:
        return APPS[name]
    except KeyError:
        raise KeyError(f"unknown app {name!r}; built-in apps: {', '.join(APPS)}") from None


__all__ = [
    "ADVANCED_RAG",
    "AGENT_RAG",
    "APPS",
    "CONTEXTUAL_RAG",
    "NAIVE_RAG",
    "SEARCH_GEN",
    "AppTemplate",
    "get_app",
]
