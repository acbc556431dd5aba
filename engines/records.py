"""Typed records that flow between the document store, the indexes and their callers, and the
passages plans work on (:class:`Doc`; torch-free, so plans import them without loading a model)."""

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
class Hit:
    """One search result: a chunk, the document it belongs to, and its score (higher is better)."""

    chunk_id: int
    score: float
    doc_key: str  # the caller's document id
    title: str
    text: str  # the chunk's text
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Doc:
    """A passage as plans see it (retrieved, reranked, ingested). ``rank``: its place (0 = best)
    in the hits of the query that found it, so hits of several queries can be fused by rank."""

    id: str
    text: str
    score: float = 0.0
    rank: int = 0


@dataclass(frozen=True)
class RerankRequest:
    """One Rerank: the ``top_k`` of ``passages`` most relevant to ``query``."""

    query: str
    passages: tuple[Doc, ...]
    top_k: int

    def __post_init__(self) -> None:
        if not isinstance(self.passages, tuple):
            object.__setattr__(self, "passages", tuple(self.passages))
        if self.top_k < 1:
            raise InvalidRequest(f"top_k must be >= 1, got {self.top_k}")


RRF_K = 60  # reciprocal rank fusion's constant (Cormack et al. 2009; LlamaIndex's default)


def reciprocal_rank(rank: int) -> float:
    """A 0-based ``rank``'s share in reciprocal rank fusion: ``1 / (RRF_K + rank + 1)``."""
    return 1.0 / (RRF_K + rank + 1)
