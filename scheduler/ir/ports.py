"""Typed ports: what flows along an edge."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class PortType(str, Enum):
    """The type of the value on a port. List types can also flow as a stream of chunks."""

    TEXT = "Text"
    TEXT_LIST = "TextList"
    VECTORS = "Vectors"
    DOC_LIST = "DocList"
    SEQ = "Seq"  # one live LLM sequence (KV state), a ``SeqHandle``
    SEQ_LIST = "SeqList"  # one sequence per item of a list
    BOOL = "Bool"
    ANY = "Any"

    @property
    def is_list(self) -> bool:
        """True for types whose values are lists (these may be streamed)."""
        return self in _LIST_TYPES


_LIST_TYPES = {PortType.TEXT_LIST, PortType.VECTORS, PortType.DOC_LIST, PortType.SEQ_LIST}


def compatible(src: PortType, dst: PortType) -> bool:
    """Whether a value of type ``src`` may feed a port of type ``dst`` (exact, or either is Any)."""
    return src == dst or PortType.ANY in (src, dst)


@dataclass(frozen=True)
class Port:
    """A named, typed input or output of a node.

    ``control`` ports carry ordering only (their value is never read); dependency pruning drops
    them. ``aligned`` marks a list input that is sliced alongside the node's streamed input (the
    documents that go with a micro-batch of vectors, for example).
    """

    name: str
    type: PortType
    control: bool = False
    aligned: bool = False

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "a").replace(".", "a").isalnum():
            raise ValueError(f"port name {self.name!r} must be a non-empty identifier")
