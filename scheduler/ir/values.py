"""Values that flow along edges at run time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ayo.engines.records import Doc

__all__ = ["SKIPPED", "Chunk", "Doc", "EndOfStream", "SeqHandle"]


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
