"""Simulated engines whose latency follows an engine profile, and a virtual-clock event loop.

The simulated engines compute the deterministic fake outputs (``fakes``) and take the time their
:class:`LatencyModel` gives for the batch they were handed (``asyncio.sleep``). On
:class:`VirtualClockLoop` that time is virtual: the loop jumps to the next timer whenever nothing
is ready, so a simulation of minutes runs in the CPU time of its bookkeeping, and latencies are
exact and repeatable (scheduling overhead counts as zero).

:class:`SimLLM` models an engine with continuous batching: prefills and decode steps waiting at
the same moment share one step, costing ``fixed + per_item * sequences + per_token * prefill
tokens``; a decode takes ``max_tokens`` steps (its text is the fake LLM's, spread over them).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from ..ir.engine_api import DecodeParams
from ..ir.values import Doc
from ..profiles.profile import DEFAULT_PROFILES, EngineProfile, LatencyModel
from .fakes import FakeIndex, FakeKeywordIndex, FakeLLM, FakeReranker, fake_vector, sample_corpus

T = TypeVar("T")


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is virtual: when no callback is ready it advances to the
    next timer instead of sleeping. Real I/O still works (polled without waiting)."""

    def __init__(self) -> None:
        super().__init__(selectors.DefaultSelector())
        self._now = 0.0
        real_select = self._selector.select

        def select(timeout: float | None = None) -> list[Any]:
            events = real_select(0)
            if events or timeout == 0:
                return events
            if timeout is None:  # no timer at all: only another thread can wake us
                return real_select(None)
            self._now += timeout
            return events

        self._selector.select = select  # type: ignore[method-assign]

    def time(self) -> float:
        return self._now


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh :class:`VirtualClockLoop`."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def _take(latency: LatencyModel, items: int, tokens: int = 0) -> None:
    await asyncio.sleep(latency.estimate_ms(items, tokens) / 1e3)


class SimLLM:
    """Continuous-batching LLM with the fake LLM's outputs (see the module doc)."""

    def __init__(self, latency: LatencyModel, name: str = "llm") -> None:
        self.latency = latency
        self.fake = FakeLLM(0.0, name)
        self.tokenizer = self.fake.tokenizer
        self._waiting: list[tuple[asyncio.Future[None], int]] = []
        self._stepper: asyncio.Task[None] | None = None
        self.steps = 0

    @property
    def open_sequences(self) -> int:
        return self.fake.open_sequences

    async def _step(self, tokens: int) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append((fut, tokens))
        if self._stepper is None or self._stepper.done():
            self._stepper = asyncio.get_running_loop().create_task(self._run_steps())
        await fut

    async def _run_steps(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            await _take(self.latency, len(batch), sum(t for _, t in batch))
            self.steps += 1
            for fut, _ in batch:
                if not fut.done():
                    fut.set_result(None)

    async def open(self) -> int:
        return await self.fake.open()

    async def prefill(self, seq: int, tokens: list[int]) -> None:
        await self._step(len(tokens))
        await self.fake.prefill(seq, tokens)

    async def decode(self, seq: int, params: DecodeParams) -> AsyncIterator[str]:
        pieces = [p async for p in self.fake.decode(seq, params)]
        steps = max(params.max_tokens, len(pieces))
        emitted = 0
        for step in range(1, steps + 1):
            await self._step(0)
            due = len(pieces) * step // steps
            while emitted < due:
                yield pieces[emitted]
                emitted += 1

    async def close(self, seq: int) -> None:
        await self.fake.close(seq)


class SimEmbedder:
    def __init__(self, latency: LatencyModel) -> None:
        self.latency = latency

    async def embed(self, texts: list[str]) -> list[list[float]]:
        await _take(self.latency, len(texts), sum(len(t) // 4 for t in texts))
        return [fake_vector(t) for t in texts]


class SimIndex(FakeIndex):
    def __init__(self, latency: LatencyModel, corpus: Iterable[Doc]) -> None:
        super().__init__(corpus)
        self.latency = latency

    async def search(self, collection: str, vectors: list[list[float]], k: int) -> list[list[Doc]]:
        await _take(self.latency, len(vectors))
        return await super().search(collection, vectors, k)

    async def ingest(self, collection: str, docs: list[Doc], vectors: list[list[float]]) -> None:
        await _take(self.latency, len(vectors))
        await super().ingest(collection, docs, vectors)


class SimKeywordIndex(FakeKeywordIndex):
    def __init__(self, latency: LatencyModel, corpus: Iterable[Doc]) -> None:
        super().__init__(corpus)
        self.latency = latency

    async def search(self, queries: list[str], k: int) -> list[list[Doc]]:
        await _take(self.latency, len(queries))
        return await super().search(queries, k)


class SimReranker(FakeReranker):
    """One cross-encoder batch over every (query, passage) pair of the calls it is given."""

    def __init__(self, latency: LatencyModel) -> None:
        super().__init__()
        self.latency = latency

    async def rerank_many(self, calls: list[tuple[str, list[Doc], int]]) -> list[list[Doc]]:
        await _take(self.latency, sum(len(p) for _, p, _ in calls))
        return [await FakeReranker.rerank(self, q, p, k) for q, p, k in calls]

    async def rerank(self, query: str, passages: list[Doc], top_k: int) -> list[Doc]:
        return (await self.rerank_many([(query, passages, top_k)]))[0]


def sim_engines(
    profiles: Mapping[str, EngineProfile] | None = None, corpus_size: int = 40
) -> dict[str, Any]:
    """Simulated engines under the built-in apps' names, latencies from ``profiles`` by kind."""
    p = {**DEFAULT_PROFILES, **(profiles or {})}
    corpus = sample_corpus(corpus_size)
    return {
        "llm": SimLLM(p["llm"].latency, "llm"),
        "judge": SimLLM(p["llm"].latency, "judge"),
        "embedder": SimEmbedder(p["embedder"].latency),
        "index": SimIndex(p["index"].latency, corpus),
        "keyword": SimKeywordIndex(p["keyword"].latency, corpus),
        "reranker": SimReranker(p["reranker"].latency),
    }
