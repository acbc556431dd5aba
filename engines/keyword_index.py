"""Keyword search engine: BM25 (the ``bm25s`` library) over named collections of texts.

It stands in for a web search engine in search-augmented generation. ``bm25s`` has no
incremental add, so a collection keeps its texts and rebuilds its BM25 matrix lazily, at the
first search after a change (10k wiki summaries index in about a second). It is not persisted:
the document store is the source of truth and loads it on start (see ``RetrievalStore``).
Queries of a round that hit the same collection share one ``retrieve`` call.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from .base import BatchConfig, BatchingEngine
from .errors import DuplicateId, InvalidRequest, UnknownCollection

logger = logging.getLogger(__name__)


def _bm25s():
    """Import bm25s, undoing its ``setLevel(DEBUG)`` on import so the app's logging applies."""
    import bm25s

    bm25s_logger = logging.getLogger("bm25s")
    if bm25s_logger.level == logging.DEBUG:
        bm25s_logger.setLevel(logging.NOTSET)
    return bm25s


@dataclass(frozen=True)
class KeywordQuery:
    collection: str
    text: str
    k: int


@dataclass(frozen=True)
class KeywordResult:
    """Matching ids and BM25 scores, best first; only documents sharing a term (score > 0)."""

    ids: np.ndarray  # int64 [m], m <= k
    scores: np.ndarray  # float32 [m]


@dataclass
class _Texts:
    texts: dict[int, str] = field(default_factory=dict)
    retriever: object | None = None  # bm25s.BM25 over `order`, None when stale
    order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


class KeywordIndex(BatchingEngine[KeywordQuery, KeywordResult]):
    """BM25 collections; ``await search(collection, text, k)``."""

    def __init__(self, stopwords: str = "en", batch: BatchConfig | None = None) -> None:
        super().__init__("keyword-index", batch)
        self.stopwords = stopwords
        self._lock = threading.RLock()
        self._colls: dict[str, _Texts] = {}

    # -- collections --------------------------------------------------------------------------
    def _get(self, name: str) -> _Texts:
        coll = self._colls.get(name)
        if coll is None:
            raise UnknownCollection(f"unknown keyword collection {name!r}")
        return coll

    def create_collection(self, name: str, *, exist_ok: bool = False) -> None:
        with self._lock:
            if name in self._colls and not exist_ok:
                raise InvalidRequest(f"keyword collection {name!r} already exists")
            self._colls.setdefault(name, _Texts())

    def drop_collection(self, name: str) -> None:
        with self._lock:
            self._get(name)
            del self._colls[name]

    def has_collection(self, name: str) -> bool:
        return name in self._colls

    def count(self, name: str) -> int:
        with self._lock:
            return len(self._get(name).texts)

    def add(self, name: str, ids: list[int] | np.ndarray, texts: list[str]) -> None:
        """Add texts under int ids; raises DuplicateId, UnknownCollection."""
        ids = [int(i) for i in ids]
        if len(ids) != len(texts):
            raise InvalidRequest(f"{len(ids)} ids for {len(texts)} texts")
        with self._lock:
            coll = self._get(name)
            clash = [i for i in ids if i in coll.texts]
            if clash or len(set(ids)) != len(ids):
                raise DuplicateId(f"keyword collection {name!r}: duplicate ids {clash[:5]}")
            coll.texts.update(zip(ids, texts))
            coll.retriever = None

    def remove(self, name: str, ids: list[int] | np.ndarray) -> int:
        with self._lock:
            coll = self._get(name)
            removed = sum(coll.texts.pop(int(i), None) is not None for i in ids)
            if removed:
                coll.retriever = None
            return removed

    # -- search -------------------------------------------------------------------------------
    async def search(self, collection: str, text: str, k: int) -> KeywordResult:
        """The ``k`` best BM25 matches for ``text``; batched with other callers' queries."""
        return await self.submit(KeywordQuery(collection, text, k))

    def search_sync(self, collection: str, text: str, k: int) -> KeywordResult:
        request = KeywordQuery(collection, text, k)
        self.validate(request)
        result = self.execute([request])[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def validate(self, request: KeywordQuery) -> None:
        self._get(request.collection)
        if not isinstance(request.text, str) or not request.text.strip():
            raise InvalidRequest("empty keyword query")
        if not isinstance(request.k, int) or request.k < 1:
            raise InvalidRequest(f"k must be a positive int, got {request.k!r}")

    def run_batch(self, requests: list[KeywordQuery]) -> list[KeywordResult | BaseException]:
        results: list[KeywordResult | BaseException] = [None] * len(requests)  # type: ignore[list-item]
        groups: dict[str, list[int]] = defaultdict(list)
        for i, r in enumerate(requests):
            groups[r.collection].append(i)
        for name, members in groups.items():
            try:
                found = self._search(name, [requests[i].text for i in members],
                                     max(requests[i].k for i in members))  # fmt: skip
            except UnknownCollection as err:
                for i in members:
                    results[i] = err
                continue
            for i, (ids, scores) in zip(members, found):
                k = requests[i].k
                results[i] = KeywordResult(ids[:k], scores[:k])
        return results

    def _tokenize(self, texts: list[str]) -> list[list[str]]:
        return _bm25s().tokenize(texts, stopwords=self.stopwords, return_ids=False,
                              show_progress=False)  # fmt: skip

    def _search(self, name: str, texts: list[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        bm25s = _bm25s()
        with self._lock:
            coll = self._get(name)
            if not coll.texts:
                empty = (np.zeros(0, np.int64), np.zeros(0, np.float32))
                return [empty for _ in texts]
            if coll.retriever is None:
                coll.order = np.fromiter(coll.texts.keys(), dtype=np.int64)
                retriever = bm25s.BM25()
                retriever.index(self._tokenize(list(coll.texts.values())), show_progress=False)
                coll.retriever = retriever
                logger.debug("keyword collection %s: indexed %d texts", name, len(coll.order))
            k = min(k, len(coll.order))
            docs, scores = coll.retriever.retrieve(  # type: ignore[attr-defined]
                self._tokenize(texts), k=k, show_progress=False, n_threads=0
            )
            out = []
            for d, s in zip(docs, scores):
                keep = s > 0
                out.append((coll.order[d[keep]], s[keep].astype(np.float32)))
            return out
