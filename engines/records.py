"""Typed records that flow between the document store, the indexes and their callers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidRequest


@dataclass(frozen=True)
class Document:
    """A document to ingest.

    Attributes:
        id: the caller's id, unique within a collection (a path, a title, a UUID...).
        text: the body; must not be blank.
        title: optional title (embedded in front of each chunk when the collection says so).
        metadata: JSON-serializable metadata, stored and returned with hits.
    """

    id: str
    text: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidRequest(f"document id must be a non-empty string, got {self.id!r}")
        if not isinstance(self.text, str) or not self.text.strip():
            raise InvalidRequest(f"document {self.id!r} has empty text")


@dataclass(frozen=True)
class Chunk:
    """A stored piece of a document. ``id`` is also its vector id in the vector index."""

    id: int
    doc_id: int
    seq: int  # position of the chunk within its document
    text: str


@dataclass(frozen=True)
class Hit:
    """One search result: a chunk, the document it belongs to, and its score (higher is better)."""

    chunk_id: int
    score: float
    doc_key: str  # the caller's document id
    title: str
    text: str  # the chunk's text
    metadata: dict[str, Any] = field(default_factory=dict)
