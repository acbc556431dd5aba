"""Cross-query batching: proxies with the engine protocols (``ir.engine_api``), backed by schedulers.

Each call a handler makes (``embed``, ``search``, ``ingest``, ``rerank``) becomes a
:class:`PendingRequest` queued in the engine's :class:`EngineScheduler` (or pool): the one place
where this engine's requests are ordered (by the batching policy) and batched. The engine's
*runner* merges the batch's payloads into as few engine calls as it can (texts concatenated,
searches grouped by collection and k, rerank requests in one scorer batch), and the engine
computes each call as given. A merged call that raises is re-run in halves
(``ayo.engines.isolation``), so only the faulty request fails.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ayo.engines.isolation import run_isolated_async
from ayo.engines.records import Doc, RerankRequest

from .policies import PendingRequest
from .request_info import RequestInfo, make_request

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


class MergingRunner:
    """A :class:`BatchRunner` that groups payloads by :meth:`group_key` and makes one engine call
    per group (:meth:`call`). A merged call that raises is re-run in halves; only payloads that
    fail alone get an error. The engine is called with ``info=None``: a merged batch has no one
    caller (its order was the engine scheduler's to decide)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def group_key(self, payload: Any) -> Hashable:
        return None

    async def call(self, payloads: Sequence[Any]) -> list[Any]:
        """One engine call for ``payloads`` (same group); one result per payload."""
        raise NotImplementedError

    @staticmethod
    def size(payload: Any) -> tuple[int, int]:
        """(items, tokens) the payload costs the engine (simulation and limits)."""
        return 1, 0

    async def run_batch(self, payloads: list[Any]) -> Sequence[Any]:
        name = type(self).__name__
        if type(self).group_key is MergingRunner.group_key:  # one group: no keys to compute
            return await run_isolated_async(payloads, self.call, name)
        groups: dict[Hashable, list[int]] = {}
        for i, p in enumerate(payloads):
            groups.setdefault(self.group_key(p), []).append(i)
        results: list[Any] = [None] * len(payloads)
        for indices in groups.values():
            out = await run_isolated_async([payloads[i] for i in indices], self.call, name)
            for i, r in zip(indices, out):
                results[i] = r
        return results


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

    @staticmethod
    def size(payload: list[str]) -> tuple[int, int]:
        return len(payload), sum(len(t) // 4 for t in payload)

    async def call(self, payloads: Sequence[list[str]]) -> list[Any]:
        flat = [t for texts in payloads for t in texts]
        return _split(list(await self.engine.embed(flat, info=None)), [len(p) for p in payloads])


class IndexRunner(MergingRunner):
    """Payloads: :class:`SearchCall` grouped by (collection, k), :class:`IngestCall` by collection."""

    def group_key(self, payload: SearchCall | IngestCall) -> Hashable:
        if isinstance(payload, SearchCall):
            return ("search", payload.collection, payload.k)
        return ("ingest", payload.collection)

    @staticmethod
    def size(payload: SearchCall | IngestCall) -> tuple[int, int]:
        return len(payload.vectors), 0

    async def call(self, payloads: Sequence[Any]) -> list[Any]:
        first = payloads[0]
        vectors = [v for p in payloads for v in p.vectors]
        if isinstance(first, IngestCall):
            docs = [d for p in payloads for d in p.docs]
            await self.engine.ingest(first.collection, docs, vectors, info=None)
            return [None] * len(payloads)
        hits = await self.engine.search(first.collection, vectors, first.k, info=None)
        return _split(list(hits), [len(p.vectors) for p in payloads])


class KeywordRunner(MergingRunner):
    """Payloads: :class:`KeywordCall` grouped by k; one ``search`` over all query texts."""

    def group_key(self, payload: KeywordCall) -> Hashable:
        return payload.k

    @staticmethod
    def size(payload: KeywordCall) -> tuple[int, int]:
        return len(payload.queries), 0

    async def call(self, payloads: Sequence[KeywordCall]) -> list[Any]:
        queries = [q for p in payloads for q in p.queries]
        hits = await self.engine.search(queries, payloads[0].k, info=None)
        return _split(list(hits), [len(p.queries) for p in payloads])


class RerankRunner(MergingRunner):
    """Payloads: lists of :class:`RerankRequest`; one ``rerank`` (one scorer batch) for all."""

    @staticmethod
    def size(payload: list[RerankRequest]) -> tuple[int, int]:
        return sum(len(r.passages) for r in payload), 0

    async def call(self, payloads: Sequence[list[RerankRequest]]) -> list[Any]:
        flat = [r for p in payloads for r in p]
        return _split(await self.engine.rerank(flat, info=None), [len(p) for p in payloads])


class Submitter(Protocol):
    """An EngineScheduler or an EnginePool: ``submit`` waits for a request's result;
    ``enqueue`` returns an awaitable of it (a future, no coroutine frame)."""

    async def submit(self, request: PendingRequest, *, wait: bool = True) -> Any: ...

    def enqueue(self, request: PendingRequest) -> Awaitable[Any]: ...


# The proxies' methods are plain functions returning the request's future: awaiting them is
# what awaiting the engine's async methods is, minus two coroutine frames per call.


class BatchedEmbedder:
    """``EmbedderProtocol`` whose calls are batched across queries by ``scheduler``."""

    def __init__(self, scheduler: Submitter) -> None:
        self.scheduler = scheduler

    def embed(self, texts: list[str], *, info: RequestInfo | None) -> Awaitable[list[Any]]:
        texts = list(texts)
        return self.scheduler.enqueue(make_request(texts, info, len(texts)))


class BatchedIndex:
    """``VectorIndexProtocol``: search and ingest batched by ``scheduler``; ``drop`` goes
    straight to the engine (one instance: collections are state, so an index is never pooled)."""

    def __init__(self, scheduler: Submitter, engine: Any) -> None:
        self.scheduler = scheduler
        self.engine = engine

    def search(
        self, collection: str, vectors: Any, k: int, *, info: RequestInfo | None
    ) -> Awaitable[list[list[Doc]]]:
        call = SearchCall(collection, list(vectors), k)
        return self.scheduler.enqueue(make_request(call, info, len(call.vectors)))

    def ingest(
        self, collection: str, docs: list[Doc], vectors: Any, *, info: RequestInfo | None
    ) -> Awaitable[None]:
        call = IngestCall(collection, list(docs), list(vectors))
        return self.scheduler.enqueue(make_request(call, info, len(call.vectors)))

    async def drop(self, collection: str) -> None:
        await self.engine.drop(collection)


class BatchedKeywordIndex:
    """``KeywordIndexProtocol`` batched by ``scheduler``."""

    def __init__(self, scheduler: Submitter) -> None:
        self.scheduler = scheduler

    def search(
        self, queries: list[str], k: int, *, info: RequestInfo | None
    ) -> Awaitable[list[list[Doc]]]:
        call = KeywordCall(list(queries), k)
        return self.scheduler.enqueue(make_request(call, info, len(call.queries)))


class BatchedReranker:
    """``RerankerProtocol`` batched by ``scheduler`` (a batch's requests share one scorer
    batch)."""

    def __init__(self, scheduler: Submitter) -> None:
        self.scheduler = scheduler

    def rerank(
        self, requests: Sequence[RerankRequest], *, info: RequestInfo | None
    ) -> Awaitable[list[list[Doc]]]:
        requests = list(requests)
        items = sum(len(r.passages) for r in requests)
        return self.scheduler.enqueue(make_request(requests, info, items))
