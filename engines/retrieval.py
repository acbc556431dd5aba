"""RetrievalStore: the document store, an embedder, the vector and keyword indexes, as one.

``ingest(collection, documents)`` chunks, embeds, commits documents + chunks + vectors to SQLite
(durable when it returns), then adds them to the in-memory indexes. On open, every collection's
vector index is caught up from the store (missing vectors added from the stored copies, stale
ones removed; nothing is re-embedded) and its keyword index is loaded from the stored texts.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from .chunker import Chunker, ChunkerConfig
from .docstore import DocumentStore
from .embedder import EmbeddingBatch
from .errors import AlreadyStored, DuplicateId, InvalidRequest, UnknownCollection
from .keyword_index import KeywordIndex
from .records import Document, Hit
from .vector_collection import IndexConfig
from .vector_index import VectorIndex, check_collection_name

logger = logging.getLogger(__name__)


class TextEncoder(Protocol):
    """What the store needs from an embedder (``Embedder`` is one)."""

    name: str
    dim: int
    max_content_tokens: int

    def token_spans(self, text: str) -> list[tuple[int, int]]: ...

    async def embed_batch(
        self, texts: list[str], *, background: bool = False
    ) -> EmbeddingBatch: ...


@dataclass(frozen=True)
class RetrievalConfig:
    """``embed_title``: embed "title\\nchunk" (the title gives short chunks their subject)."""

    chunker: ChunkerConfig = field(default_factory=ChunkerConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    embed_title: bool = True


@dataclass(frozen=True)
class IngestAck:
    """Returned once the ingested documents are committed (they survive a crash from here)."""

    collection: str
    documents: int
    chunks: int
    truncated_chunks: int  # chunks cut at the embedder's token limit
    skipped: list[str]  # ids already present (on_duplicate="skip")


@dataclass(frozen=True)
class CollectionSummary:
    name: str
    documents: int
    chunks: int
    vectors: int
    dim: int
    embedder: str
    index_kind: str


class RetrievalStore:
    """A data directory of collections: ``docs.sqlite3`` + ``vectors/<collection>/``."""

    def __init__(
        self, data_dir: str | Path, embedder: TextEncoder, config: RetrievalConfig | None = None
    ) -> None:
        self.data_dir = Path(data_dir)
        self.embedder = embedder
        self.config = config or RetrievalConfig()
        self.store = DocumentStore(self.data_dir / "docs.sqlite3")
        self.vectors = VectorIndex(self.data_dir / "vectors", self.config.index)
        self.keywords = KeywordIndex()
        chunk_tokens = min(self.config.chunker.chunk_tokens, embedder.max_content_tokens)
        if chunk_tokens < self.config.chunker.chunk_tokens:
            logger.info("chunks capped at %d tokens (the embedder's limit)", chunk_tokens)
        self.chunker = Chunker(
            embedder.token_spans, ChunkerConfig(chunk_tokens, self.config.chunker.overlap)
        )
        for coll in self.store.collections():
            self._catch_up(coll.name, coll.dim)

    def _catch_up(self, name: str, dim: int) -> None:
        self.vectors.create_collection(name, dim, exist_ok=True)
        stored = self.store.chunk_ids(name)
        indexed = self.vectors.ids(name)
        stale = np.setdiff1d(indexed, stored)
        missing = np.setdiff1d(stored, indexed)
        if len(stale):
            self.vectors.remove(name, stale)
        for ids, vecs in self.store.chunk_vectors(name, missing if len(missing) else []):
            self.vectors.add(name, ids, vecs)
        if len(stale) or len(missing):
            logger.info("collection %s: index caught up (+%d, -%d)", name, len(missing), len(stale))
            self.vectors.save()
        self.keywords.create_collection(name, exist_ok=True)
        ids, texts = self.store.chunk_texts(name)
        self.keywords.add(name, ids, texts)

    # -- collections --------------------------------------------------------------------------
    def create_collection(self, name: str) -> None:
        """Create (or reopen) a collection for this store's embedder."""
        check_collection_name(name)
        self.store.create_collection(name, self.embedder.dim, self.embedder.name)
        self.vectors.create_collection(name, self.embedder.dim, exist_ok=True)
        self.keywords.create_collection(name, exist_ok=True)

    def collections(self) -> list[CollectionSummary]:
        out = []
        for c in self.store.collections():
            info = {i.name: i for i in self.vectors.collections()}.get(c.name)
            out.append(CollectionSummary(c.name, c.documents, c.chunks,
                                         info.count if info else 0, c.dim, c.embedder,
                                         info.kind if info else "none"))  # fmt: skip
        return out

    def list_documents(self, collection: str, after: int = 0, limit: int = 100) -> list:
        """Stored documents without their text (``DocumentStore.list_documents``)."""
        return self.store.list_documents(collection, after, limit)

    def _require(self, collection: str) -> None:
        if not self.vectors.has_collection(collection):
            raise UnknownCollection(f"unknown collection {collection!r}")

    # -- ingest -------------------------------------------------------------------------------
    async def ingest(
        self, collection: str, documents: list[Document], on_duplicate: str = "error"
    ) -> IngestAck:
        """Chunk, embed and store ``documents``; returns after the commit.

        Raises ``UnknownCollection``, ``DuplicateId`` (``on_duplicate="error"``: an id repeated
        in the batch; ``AlreadyStored``: one already stored; nothing is written),
        ``InvalidRequest``. With ``"skip"`` those are left out (the first of a repeated id is
        kept) and listed in ``skipped``.
        """
        if on_duplicate not in ("error", "skip"):
            raise InvalidRequest(f"on_duplicate must be 'error' or 'skip', got {on_duplicate!r}")
        self.store.collection(collection)
        keys = [d.id for d in documents]
        repeated = {k for k, n in collections.Counter(keys).items() if n > 1}
        if repeated and on_duplicate == "error":
            raise DuplicateId(f"ids repeated within this ingest: {sorted(repeated)[:5]}")
        existing = await asyncio.to_thread(self.store.existing_keys, collection, keys)
        if existing and on_duplicate == "error":
            raise AlreadyStored(f"documents already in {collection!r}: {sorted(existing)[:5]}")
        seen = set(existing)
        kept = []
        for d in documents:
            if d.id not in seen:
                seen.add(d.id)
                kept.append(d)
        documents, existing = kept, existing | repeated
        stop = threading.Event()  # a cancelled ingest stops chunking within a section
        try:
            chunks = await asyncio.to_thread(lambda: [self._split(d, stop) for d in documents])
        except asyncio.CancelledError:
            stop.set()
            raise
        inputs = [self._embed_input(d, c) for d, cs in zip(documents, chunks) for c in cs]
        batch = await self.embedder.embed_batch(inputs, background=True) if inputs else None
        vectors, start = [], 0
        for cs in chunks:
            vectors.append(batch.vectors[start : start + len(cs)] if batch else np.zeros((0, 0)))
            start += len(cs)
        stored = await asyncio.to_thread(
            self.store.add_documents, collection, documents, chunks, vectors
        )
        ids = np.array([i for s in stored for i in s.chunk_ids], dtype=np.int64)
        if len(ids):
            await asyncio.to_thread(self.vectors.add, collection, ids, batch.vectors)
            texts = [f"{d.title}\n{c}" if d.title else c for d, cs in zip(documents, chunks)
                     for c in cs]  # fmt: skip
            await asyncio.to_thread(self.keywords.add, collection, ids, texts)
        return IngestAck(collection, len(documents), len(ids),
                         batch.num_truncated if batch else 0, sorted(existing))  # fmt: skip

    def _split(self, doc: Document, stop: threading.Event | None = None) -> list[str]:
        budget = None
        if self.config.embed_title and doc.title:
            budget = self.chunker.config.chunk_tokens - len(self.embedder.token_spans(doc.title))
        return self.chunker.split(doc.text, max(budget, 32) if budget is not None else None, stop)

    def _embed_input(self, doc: Document, chunk: str) -> str:
        return f"{doc.title}\n{chunk}" if self.config.embed_title and doc.title else chunk

    async def delete(self, collection: str, keys: list[str]) -> int:
        """Delete documents by id; returns how many chunks went with them."""
        ids = np.array(
            await asyncio.to_thread(self.store.delete_documents, collection, keys), np.int64
        )
        if len(ids):
            await asyncio.to_thread(self.vectors.remove, collection, ids)
            await asyncio.to_thread(self.keywords.remove, collection, ids)
        return len(ids)

    # -- search -------------------------------------------------------------------------------
    async def search(self, collection: str, queries: list[str], k: int = 10) -> list[list[Hit]]:
        """Dense search: the ``k`` best chunks per query text, best first."""
        self._require(collection)
        vectors = (await self.embedder.embed_batch(queries)).vectors
        return await self.search_vectors(collection, vectors, k)

    async def search_vectors(
        self, collection: str, vectors: np.ndarray, k: int = 10
    ) -> list[list[Hit]]:
        result = await self.vectors.search(collection, vectors, k)
        return await asyncio.to_thread(
            lambda: [self.store.hits(i, s) for i, s in zip(result.ids, result.scores)]
        )

    async def keyword_search(
        self, collection: str, queries: list[str], k: int = 10
    ) -> list[list[Hit]]:
        """BM25 search: the ``k`` best chunks per query text (only chunks sharing a term)."""
        self._require(collection)
        results = await asyncio.gather(*(self.keywords.search(collection, q, k) for q in queries))
        return await asyncio.to_thread(lambda: [self.store.hits(r.ids, r.scores) for r in results])

    def close(self) -> None:
        """Persist the vector index and release everything (the store needs no flush)."""
        self.vectors.close()
        self.keywords.close()
        self.store.close()
