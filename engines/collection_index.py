"""The plans' indexes over a :class:`~ayo.engines.retrieval.RetrievalStore`'s collections.

- :class:`CollectionIndex` (kind ``index``): dense search over the store's collections (a hit
  is a chunk: ``Doc`` id ``"<document id>#<chunk id>"``), and per-query collections (the
  documents a query brings, ``Ingest`` of its own) kept in memory, searched by exact inner
  product and dropped with the query.
- :class:`CollectionKeywordIndex` (kind ``keyword``): BM25 over one of the store's collections.

A plan names the collection it searches; ``default`` stands for the collection the index was
built for (the server's ``--collection``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .base import LocalEngine
from .errors import InvalidRequest, UnknownCollection
from .records import Doc, Hit

if TYPE_CHECKING:
    from .retrieval import RetrievalStore


def _doc(hit: Hit) -> Doc:
    return Doc(f"{hit.doc_key}#{hit.chunk_id}", hit.text, round(float(hit.score), 6))


def _missing(collection: str, store: RetrievalStore) -> UnknownCollection:
    return UnknownCollection(
        f"collection {collection!r} is not in the data directory {store.data_dir}: ingest it "
        f"with `python -m ayo ingest wiki --collection {collection} --data-dir {store.data_dir}` "
        "(or start `python -m ayo.server` once on that data directory)"
    )


class CollectionIndex(LocalEngine):
    """Dense search over ``store``'s collections (``default``: ``collection``) and over
    per-query collections in memory."""

    kind = "index"

    def __init__(self, store: RetrievalStore, collection: str = "default") -> None:
        self.store = store
        self.collection = collection
        self._memory: dict[str, tuple[list[Doc], np.ndarray]] = {}

    async def search(
        self, collection: str, vectors: Any, k: int, *, info: object = None
    ) -> list[list[Doc]]:
        queries = np.asarray(vectors, dtype=np.float32)
        if collection in self._memory:
            docs, matrix = self._memory[collection]
            scores = queries @ matrix.T
            order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
            return [
                [Doc(docs[j].id, docs[j].text, round(float(s[j]), 6)) for j in row]
                for row, s in zip(order, scores)
            ]
        name = self.collection if collection == "default" else collection
        if not self.store.vectors.has_collection(name):
            raise _missing(name, self.store)
        hits = await self.store.search_vectors(name, queries, k)
        return [[_doc(h) for h in per_query] for per_query in hits]

    async def ingest(
        self, collection: str, docs: list[Doc], vectors: Any, *, info: object = None
    ) -> None:
        """Add ``docs`` to the per-query collection ``collection`` (stored collections take
        documents through ``RetrievalStore.ingest``, durably)."""
        if self.store.vectors.has_collection(collection):
            raise InvalidRequest(
                f"collection {collection!r} is a stored collection: add documents to it with "
                "`python -m ayo ingest`, not from a query"
            )
        new = np.asarray(vectors, dtype=np.float32).reshape(len(docs), -1)
        old_docs, old = self._memory.get(collection, ([], np.zeros((0, new.shape[1]), np.float32)))
        self._memory[collection] = (old_docs + list(docs), np.concatenate([old, new]))

    async def drop(self, collection: str) -> None:
        self._memory.pop(collection, None)

    @property
    def temp_collections(self) -> int:
        """Per-query collections alive now (each query drops its own when it ends)."""
        return len(self._memory)


class CollectionKeywordIndex(LocalEngine):
    """BM25 over ``store``'s collection ``collection``."""

    kind = "keyword"

    def __init__(self, store: RetrievalStore, collection: str = "default") -> None:
        self.store = store
        self.collection = collection

    async def search(self, queries: list[str], k: int, *, info: object = None) -> list[list[Doc]]:
        if not self.store.vectors.has_collection(self.collection):
            raise _missing(self.collection, self.store)
        hits = await self.store.keyword_search(self.collection, list(queries), k)
        return [[_doc(h) for h in per_query] for per_query in hits]
