"""Ayo's engines: embedder, reranker, vector index, keyword index, document store (and the LLM
engine in ``ayo.engines.llm``).

Public names are resolved lazily (module ``__getattr__``), so ``import ayo.engines`` stays cheap:
torch, transformers, faiss and bm25s load only when an engine is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import BatchConfig, BatchingEngine, EngineStats
    from .chunker import Chunker, ChunkerConfig
    from .docstore import DocumentStore
    from .embedder import Embedder, EmbedderConfig
    from .errors import (
        AlreadyStored,
        DimensionMismatch,
        DuplicateId,
        EngineClosed,
        EngineError,
        InvalidRequest,
        ModelNotFound,
        UnknownCollection,
    )
    from .keyword_index import KeywordIndex
    from .records import Document, Hit
    from .reranker import Reranker, RerankResult
    from .retrieval import RetrievalConfig, RetrievalStore
    from .vector_collection import IndexConfig
    from .vector_index import SearchResult, VectorIndex

_EXPORTS = {
    "BatchConfig": "base",
    "BatchingEngine": "base",
    "EngineStats": "base",
    "Chunker": "chunker",
    "ChunkerConfig": "chunker",
    "DocumentStore": "docstore",
    "Embedder": "embedder",
    "EmbedderConfig": "embedder",
    "AlreadyStored": "errors",
    "DimensionMismatch": "errors",
    "DuplicateId": "errors",
    "EngineClosed": "errors",
    "EngineError": "errors",
    "InvalidRequest": "errors",
    "ModelNotFound": "errors",
    "UnknownCollection": "errors",
    "KeywordIndex": "keyword_index",
    "Document": "records",
    "Hit": "records",
    "Reranker": "reranker",
    "RerankResult": "reranker",
    "RetrievalConfig": "retrieval",
    "RetrievalStore": "retrieval",
    "IndexConfig": "vector_collection",
    "SearchResult": "vector_index",
    "VectorIndex": "vector_index",
}

__all__ = [
    "AlreadyStored",
    "BatchConfig",
    "BatchingEngine",
    "Chunker",
    "ChunkerConfig",
    "DimensionMismatch",
    "Document",
    "DocumentStore",
    "DuplicateId",
    "Embedder",
    "EmbedderConfig",
    "EngineClosed",
    "EngineError",
    "EngineStats",
    "Hit",
    "IndexConfig",
    "InvalidRequest",
    "KeywordIndex",
    "ModelNotFound",
    "RerankResult",
    "Reranker",
    "RetrievalConfig",
    "RetrievalStore",
    "SearchResult",
    "UnknownCollection",
    "VectorIndex",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
