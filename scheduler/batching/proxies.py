"""Cross-query batching: engine proxies with the ``engine_api`` interfaces, backed by schedulers.

Each call a handler makes (``embed``, ``search``, ``ingest``, ``rerank``, ``prefill``) becomes a
:class:`PendingRequest` submitted to the engine's :class:`EngineScheduler` (or pool); the
scheduler forms a batch from the requests of every query, and the engine's *runner* merges the
batch's payloads into as few real engine calls as it can (texts concatenated, searches grouped by
collection and k) and splits the results back. A merged call that raises is re-run one payload at
a time, so only the faulty request fails.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .policies import PendingRequest
from .request_info import make_request

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SearchCall:
    collection: str
    vectors: list[Any]
    k: int


@dataclass(slots=True)
class IngestCall:
    collection: str
    docs: list[Any]
    vectors: list[Any]


@dataclass(slots=True)
class KeywordCall:
    queries: list[str]
    k: int


@dataclass(slots=True)
class RerankCall:
    query: str
    passages: list[Any]
    top_k: int


@dataclass(slots=True)
class PrefillCall:
    seq: Any
    tokens: list[int]
    info: Any = None  # the LLM engine's step-order info (``BatchedLLM``), None: none given


class MergingRunner:
    """A :class:`BatchRunner` that groups payloads by :meth:`group_key` and makes one engine call
    per group (:meth:`call`). If a merged call raises, its payloads run again one by one and only
    those that fail alone get an error."""

    def group_key(self, payload: Any) -> Hashable:
        return None

    async def call(self, payloads: list[Any]) -> list[Any]:
        """One engine call for ``payloads`` (same group); one result per payload."""
        raise NotImplementedError

    @staticmethod
    def size(payload: Any) -> tuple[int, int]:
        """(items, tokens) the payload costs the engine (simulation and limits)."""
        return 1, 0

    async def run_batch(self, payloads: list[Any]) -> Sequence[Any]:
        if type(self).group_key is MergingRunner.group_key:  # one group: no keys to compute
            return await self._call_isolated(payloads)
        groups: dict[Hashable, list[int]] = {}
        for i, p in enumerate(payloads):
            groups.setdefault(self.group_key(p), []).append(i)
        results: list[Any] = [None] * len(payloads)
        for indices in groups.values():
            part = [payloads[i] for i in indices]
            out = await self._call_isolated(part)
            for i, r in zip(indices, out):
                results[i] = r
        return results

    async def _call_isolated(self, part: list[Any]) -> list[Any]:
        try:
            out = await self.call(part)
            if len(out) != len(part):
                raise RuntimeError(f"engine returned {len(out)} results for {len(part)} requests")
            return out
        except Exception as exc:
            if len(part) == 1:
                return [exc]
            log.info("merged call of %d failed (%r); retrying one by one", len(part), exc)
        alone = []
        for p in part:
            try:
                alone.append((await self.call([p]))[0])
            except Exception as exc:
                alone.append(exc)
        return alone


def _split(flat: Sequence[Any], lengths: list[int]) -> list[list[Any]]:
    if len(flat) != sum(lengths):
        raise RuntimeError(f"engine returned {len(flat)} results for {sum(lengths)} inputs")
    out, start = [], 0
    for n in lengths:
        out.append(list(flat[start : start + n]))
        start += n
    return out


class EmbedRunner(MergingRunner):
    """Payload: a list of texts; one ``embed`` over all texts of the batch."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    @staticmethod
    def size(payload: list[str]) -> tuple[int, int]:
        return len(payload), sum(len(t) // 4 for t in payload)

    async def call(self, payloads: list[list[str]]) -> list[Any]:
        flat = [t for texts in payloads for t in texts]
        return _split(list(await self.engine.embed(flat)), [len(p) for p in payloads])


class IndexRunner(MergingRunner):
    """Payloads: :class:`SearchCall` grouped by (collection, k), :class:`IngestCall` by collection."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def group_key(self, payload: SearchCall | IngestCall) -> Hashable:
        if isinstance(payload, SearchCall):
            return ("search", payload.collection, payload.k)
        return ("ingest", payload.collection)

    @staticmethod
    def size(payload: SearchCall | IngestCall) -> tuple[int, int]:
        return len(payload.vectors), 0

    async def call(self, payloads: list[Any]) -> list[Any]:
        first = payloads[0]
        if isinstance(first, IngestCall):
            docs = [d for p in payloads for d in p.docs]
            vectors = [v for p in payloads for v in p.vectors]
            await self.engine.ingest(first.collection, docs, vectors)
            return [None] * len(payloads)
        vectors = [v for p in payloads for v in p.vectors]
        hits = await self.engine.search(first.collection, vectors, first.k)
        return _split(list(hits), [len(p.vectors) for p in payloads])


class KeywordRunner(MergingRunner):
    """Payloads: :class:`KeywordCall` grouped by k; one ``search`` over all query texts."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def group_key(self, payload: KeywordCall) -> Hashable:
        return payload.k

    @staticmethod
    def size(payload: KeywordCall) -> tuple[int, int]:
        return len(payload.queries), 0

    async def call(self, payloads: list[KeywordCall]) -> list[Any]:
        hits = await self.engine.search([q for p in payloads for q in p.queries], payloads[0].k)
        return _split(list(hits), [len(p.queries) for p in payloads])


class RerankRunner(MergingRunner):
    """Payloads: :class:`RerankCall`. Uses the engine's ``rerank_many(calls)`` when it has one
    (one cross-encoder batch); otherwise one ``rerank`` per payload, errors kept per payload."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    @staticmethod
    def size(payload: RerankCall) -> tuple[int, int]:
        return len(payload.passages), 0

    async def call(self, payloads: list[RerankCall]) -> list[Any]:
        many = getattr(self.engine, "rerank_many", None)
        if many is not None:
            return list(await many([(p.query, p.passages, p.top_k) for p in payloads]))
        out: list[Any] = []
        for p in payloads:
            try:
                out.append(await self.engine.rerank(p.query, p.passages, p.top_k))
            except Exception as exc:
                out.append(exc)
        return out


def with_info(method: Callable[..., Any], info: Any, *args: Any) -> Any:
    """``method(*args)``, passing ``info=`` only when there is one: an LLM engine that takes no
    step order (a user's, the fakes) needs no ``info`` parameter."""
    return method(*args) if info is None else method(*args, info=info)


class PrefillRunner(MergingRunner):
    """Payloads: :class:`PrefillCall`. The LLM engine batches concurrent prefills itself
    (continuous batching), so the batch is issued as concurrent calls, errors kept per call."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    @staticmethod
    def size(payload: PrefillCall) -> tuple[int, int]:
        return 1, len(payload.tokens)

    async def call(self, payloads: list[PrefillCall]) -> list[Any]:
        prefill = self.engine.prefill
        calls = [with_info(prefill, p.info, p.seq, p.tokens) for p in payloads]
        return await asyncio.gather(*calls, return_exceptions=True)


class Submitter(Protocol):
    """An EngineScheduler or an EnginePool: ``submit`` waits for a request's result;
    ``enqueue`` returns an awaitable of it (a future, no coroutine frame)."""

    async def submit(self, request: PendingRequest, *, wait: bool = True) -> Any: ...

    def enqueue(self, request: PendingRequest) -> Awaitable[Any]: ...


# The proxies' methods are plain functions returning the request's future: awaiting them is
# what awaiting the engine's async methods is, minus two coroutine frames per call.


class BatchedEmbedder:
    """``Embedder`` whose calls are batched across queries by ``scheduler``."""

    def __init__(self, scheduler: Submitter) -> None:
        self.scheduler = scheduler

    def embed(self, texts: list[str]) -> Awaitable[list[Any]]:
        texts = list(texts)
        return self.scheduler.enqueue(make_request(texts, len(texts)))


class BatchedIndex:
    """``VectorIndex``: search and ingest batched by ``scheduler``; ``drop`` goes straight to the
    engine (one instance: collections are state, so an index is never pooled)."""

    def __init__(self, scheduler: Submitter, engine: Any) -> None:
        self.scheduler = scheduler
        self.engine = engine

    def search(self, collection: str, vectors: list[Any], k: int) -> Awaitable[list[list[Any]]]:
        call = SearchCall(collection, list(vectors), k)
        return self.scheduler.enqueue(make_request(call, len(call.vectors)))

    def ingest(self, collection: str, docs: list[Any], vectors: list[Any]) -> Awaitable[None]:
        call = IngestCall(collection, list(docs), list(vectors))
        return self.scheduler.enqueue(make_request(call, len(call.vectors)))

    async def drop(self, collection: str) -> None:
        await self.engine.drop(collection)


class BatchedKeywordIndex:
    """``KeywordIndex`` batched by ``scheduler``."""

    def __init__(self, scheduler: Submitter) -> None:
        self.scheduler = scheduler

    def search(self, queries: list[str], k: int) -> Awaitable[list[list[Any]]]:
        call = KeywordCall(list(queries), k)
        return self.scheduler.enqueue(make_request(call, len(call.queries)))


class BatchedReranker:
    """``Reranker`` batched by ``scheduler``."""

    def __init__(self, scheduler: Submitter) -> None:
        self.scheduler = scheduler

    def rerank(self, query: str, passages: list[Any], top_k: int) -> Awaitable[list[Any]]:
        call = RerankCall(query, list(passages), top_k)
        return self.scheduler.enqueue(make_request(call, len(call.passages)))
