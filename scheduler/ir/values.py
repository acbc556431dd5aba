"""Values that flow along edges at run time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(frozen=True)
class Doc:
    """A retrieved or ingested passage. ``rank``: its place (0 = best) in the hits of the query
    that found it, so hits of several queries can be fused by rank."""

    id: str
    text: str
    score: float = 0.0
    rank: int = 0


class SeqHandle(NamedTuple):
    """A live LLM sequence and the token ids already prefilled into it (a named tuple: one is
    made per prefill, and a frozen dataclass's __init__ costs a call per field)."""

    engine: str
    seq: Any
    prefilled: tuple[int, ...] = ()


@dataclass(frozen=True)
class Chunk:
    """One micro-batch on a stream edge: ``items`` start at item ``offset`` of the whole list.

    ``index`` counts chunks from 0 in the order the producer emitted them.
    """

    index: int
    offset: int
    items: Any


@dataclass(frozen=True)
class EndOfStream:
    """Closes a stream. ``skipped`` is true when the producer's branch was not taken."""

    chunks: int
    skipped: bool = False


class _Skipped:
    """The value of every port on a branch a Condition did not take."""

    _instance: _Skipped | None = None

    def __new__(cls) -> _Skipped:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED = _Skipped()
