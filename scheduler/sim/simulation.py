"""Simulated engines whose latency follows an engine profile, and a virtual-clock event loop.

The simulated engines compute the deterministic fake outputs (``fakes``) and take the time their
:class:`LatencyModel` gives for the batch they were handed (``asyncio.sleep``). On
:class:`VirtualClockLoop` that time is virtual: the loop jumps to the next timer whenever nothing
is ready, so a simulation of minutes runs in the CPU time of its bookkeeping, and latencies are
exact and repeatable (scheduling overhead counts as zero).

:class:`SimLLM` models an engine with continuous batching: prefills and decode steps waiting at
the same moment share one step (in the runtime's step order, under a token budget), costing
``fixed + per_item * sequences + per_token * prefill tokens``; a decode takes ``max_tokens``
steps (its text is the fake LLM's, spread over them); background prefills fill idle gaps.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from ayo.engines.base import LocalEngine
from ayo.engines.llm.outputs import DecodePiece
from ayo.engines.llm.sampling import SamplingParams
from ayo.engines.records import Doc, RerankRequest

from ..ir.engine_api import StepOrder
from ..profiles.profile import DEFAULT_PROFILES, EngineProfile, LatencyModel, profile_for
from .fakes import (
    CHARS_PER_TOKEN,
    FakeIndex,
    FakeKeywordIndex,
    FakeLLM,
    FakeReranker,
    PieceStream,
    fake_rerank,
    fake_vector,
    sample_corpus,
)

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


IDLE_GRACE_S = 0.02  # as the real engine: idle this long before background prefills run


class _Work:
    """One sequence's request for the next steps: ``tokens`` still to prefill (0: a decode
    step), ``info`` for the step order; ``future`` resolves when it is computed."""

    __slots__ = ("future", "info", "tokens")

    def __init__(self, future: asyncio.Future[None], tokens: int, info: Any) -> None:
        self.future = future
        self.tokens = tokens
        self.info = info


class SimLLM(LocalEngine):
    """Continuous-batching LLM with the fake LLM's outputs (see the module doc).

    Each step takes the waiting work in the step order (``set_step_order``; else arrival)
    under a token budget (``max_step_tokens``: a longer prefill continues in the next steps,
    as the real engine's chunked prefill) and costs ``latency.estimate_ms(sequences, prefill
    tokens)``. Background tokens (``prefill_when_idle``) run in a step of their own once the
    engine has been idle ``IDLE_GRACE_S``, or with their sequence's next call."""

    kind = "llm"

    def __init__(
        self, latency: LatencyModel, name: str = "llm", max_step_tokens: int = 512
    ) -> None:
        if max_step_tokens < 1:
            raise ValueError(f"max_step_tokens must be >= 1, got {max_step_tokens}")
        self.latency = latency
        self.max_step_tokens = max_step_tokens
        self.fake = FakeLLM(0.0, name)
        self.tokenizer = self.fake.tokenizer
        self._waiting: list[_Work] = []
        self._held: dict[int, list[int]] = {}  # background tokens per sequence
        # decodes under way: between two of its steps a decode is not idle work's gap (the
        # real engine keeps a decoding sequence running; only its client's turn is simulated)
        self._decoding = 0
        self._queued: asyncio.Event | None = None  # set when work is queued or a decode ends
        self._stepper: asyncio.Task[None] | None = None
        self.order: StepOrder | None = None
        self.steps = 0
        self.step_items = 0  # sequences over all steps (the mean batch: step_items / steps)
        self.background_steps = 0

    def set_step_order(self, order: StepOrder | None) -> None:
        self.order = order

    def kv_usage(self) -> float:
        return 0.0

    @property
    def open_sequences(self) -> int:
        return self.fake.open_sequences

    def _wake(self) -> None:
        if self._queued is not None:
            self._queued.set()
        if self._stepper is None or self._stepper.done():
            self._stepper = asyncio.get_running_loop().create_task(self._run_steps())

    async def _step(self, tokens: int, info: Any) -> None:
        work = _Work(asyncio.get_running_loop().create_future(), tokens, info)
        self._waiting.append(work)
        self._wake()
        await work.future

    async def _run_steps(self) -> None:
        self._queued = self._queued or asyncio.Event()
        while self._waiting or self._held or self._decoding:
            if not self._waiting and self._decoding:  # a decode's next step comes at once
                self._queued.clear()
                await self._queued.wait()
                continue
            if not self._waiting:  # idle: background tokens go in after the grace period,
                self._queued.clear()  # unless work comes first (as the real engine's wait)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._queued.wait(), IDLE_GRACE_S)
                if self._waiting or not self._held:
                    continue
                held, self._held = self._held, {}
                await _take(self.latency, len(held), sum(len(t) for t in held.values()))
                for seq, tokens in held.items():
                    if seq in self.fake._seqs:
                        self.fake._seqs[seq].extend(tokens)
                self.background_steps += 1
                continue
            ranked = self.order(list(self._waiting)) if self.order else list(self._waiting)
            budget, step, tokens = self.max_step_tokens, [], 0
            for work in ranked:
                if budget == 0:
                    break
                take = min(work.tokens, budget) if work.tokens else 0
                step.append((work, take))
                budget -= take if work.tokens else 1
                tokens += take
            await _take(self.latency, len(step), tokens)
            self.steps += 1
            self.step_items += len(step)
            for work, take in step:
                work.tokens -= take
                if work.tokens == 0 and not work.future.done():
                    self._waiting.remove(work)
                    work.future.set_result(None)

    def _fold(self, seq: int) -> list[int]:
        """The sequence's background tokens, taken to go with its next call."""
        return self._held.pop(seq, [])

    async def open(self) -> int:
        return await self.fake.open()

    async def prefill(self, seq: int, tokens: list[int], *, info: Any = None) -> None:
        tokens = self._fold(seq) + list(tokens)
        self.fake._tokens(seq)  # an unknown sequence fails at once
        await self._step(len(tokens), info)
        await self.fake.prefill(seq, tokens)

    def prefill_when_idle(self, seq: int, tokens: list[int], *, info: Any = None) -> None:
        self.fake._tokens(seq)
        if tokens:
            self._held.setdefault(seq, []).extend(tokens)
            self._wake()

    def decode(self, seq: int, params: SamplingParams, *, info: Any = None) -> PieceStream:
        self.fake._tokens(seq)
        return PieceStream(self._decode(seq, params, info), params)

    async def _decode(
        self, seq: int, params: SamplingParams, info: Any
    ) -> AsyncIterator[DecodePiece]:
        held = self._fold(seq)
        if held:
            await self._step(len(held), info)
            await self.fake.prefill(seq, held)
        text = "".join([p.text async for p in self.fake.decode(seq, params)])
        pieces = [text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]
        steps = max(params.max_tokens, len(pieces))
        emitted = 0
        self._decoding += 1
        try:
            for step in range(1, steps + 1):
                await self._step(0, info)
                due = len(pieces) * step // steps
                while emitted < due:
                    yield DecodePiece(emitted, pieces[emitted], emitted)
                    emitted += 1
        finally:
            self._decoding -= 1
            self._wake()

    async def score(self, seq: int, candidates: list[str], *, info: Any = None) -> list[float]:
        """One step prefilling every candidate (its tokens) after the sequence."""
        held = self._fold(seq)
        if held:
            await self.fake.prefill(seq, held)
        tokens = sum(len(self.tokenizer.encode(c)) for c in candidates) + len(held)
        await self._step(max(tokens, 1), info)
        return await self.fake.score(seq, candidates)

    async def close(self, seq: int) -> None:
        self._held.pop(seq, None)
        await self.fake.close(seq)


class SimEmbedder(LocalEngine):
    kind = "embedder"

    def __init__(self, latency: LatencyModel) -> None:
        self.latency = latency

    async def embed(self, texts: list[str], *, info: Any = None) -> list[list[float]]:
        await _take(self.latency, len(texts), sum(len(t) // 4 for t in texts))
        return [fake_vector(t) for t in texts]


class SimIndex(FakeIndex):
    """Searches cost ``latency``; ingests ``ingest_latency`` (default: the same), as a
    profile's ``index.Ingest`` entry may say (adding vectors is a copy, searching a scan)."""

    def __init__(
        self,
        latency: LatencyModel,
        corpus: Iterable[Doc],
        ingest_latency: LatencyModel | None = None,
    ) -> None:
        super().__init__(corpus)
        self.latency = latency
        self.ingest_latency = ingest_latency or latency

    async def search(
        self, collection: str, vectors: Any, k: int, *, info: Any = None
    ) -> list[list[Doc]]:
        await _take(self.latency, len(vectors))
        return self.search_now(collection, vectors, k)

    async def ingest(
        self, collection: str, docs: list[Doc], vectors: Any, *, info: Any = None
    ) -> None:
        await _take(self.ingest_latency, len(vectors))
        self.collections.setdefault(collection, []).extend(zip(docs, vectors))


class SimKeywordIndex(FakeKeywordIndex):
    def __init__(self, latency: LatencyModel, corpus: Iterable[Doc]) -> None:
        super().__init__(corpus)
        self.latency = latency

    async def search(self, queries: list[str], k: int, *, info: Any = None) -> list[list[Doc]]:
        await _take(self.latency, len(queries))
        return self.search_now(queries, k)


class SimReranker(FakeReranker):
    """One cross-encoder batch over every (query, passage) pair of the requests it is given."""

    def __init__(self, latency: LatencyModel) -> None:
        super().__init__()
        self.latency = latency

    async def rerank(
        self, requests: Sequence[RerankRequest], *, info: Any = None
    ) -> list[list[Doc]]:
        await _take(self.latency, sum(len(r.passages) for r in requests))
        return [fake_rerank(r) for r in requests]


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
        "index": SimIndex(
            p["index"].latency, corpus, profile_for(p, "index", "index", "Ingest").latency
        ),
        "keyword": SimKeywordIndex(p["keyword"].latency, corpus),
        "reranker": SimReranker(p["reranker"].latency),
    }
