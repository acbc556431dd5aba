"""Deterministic fake engines implementing the engine protocols (``ir.engine_api``).

They live in the package, not in tests/, because the runtime reuses them: its tests check that
optimized and unoptimized plans agree, and its simulator gives them a latency (``delay_s``).
Every output is a pure function of the inputs: the fake LLM's text depends on the exact token
sequence prefilled, so a prefill split that changed the prompt by one token changes the answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from ayo.engines.base import LocalEngine
from ayo.engines.llm.outputs import DecodeEnd, DecodePiece
from ayo.engines.llm.sampling import SamplingParams
from ayo.engines.records import Doc, RerankRequest

from ..ir.engine_api import StepOrder
from ..ir.prompt import RegexTokenizer

CHARS_PER_TOKEN = 5  # the fake LLM writes its text five characters per "token"


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x1f".join(parts).encode()).digest()


class _Delayed(LocalEngine):
    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls = 0

    async def _work(self) -> None:
        self.calls += 1
        await asyncio.sleep(self.delay_s)  # simulated compute time (0: just yield to the loop)


class PieceStream:
    """A decode stream over an async generator of :class:`DecodePiece`: ``end`` is set once
    the pieces are exhausted (``length`` when ``max_tokens`` pieces were written, else
    ``stop``); ``aclose`` stops the generator."""

    def __init__(self, pieces: AsyncIterator[DecodePiece], params: SamplingParams) -> None:
        self._pieces = pieces
        self._params = params
        self._count = 0
        self._text: list[str] = []
        self._ids: list[int] = []
        self.end: DecodeEnd | None = None

    def __aiter__(self) -> PieceStream:
        return self

    async def __anext__(self) -> DecodePiece:
        try:
            piece = await anext(self._pieces)
        except StopAsyncIteration:
            if self.end is None:
                reason = "length" if self._count >= self._params.max_tokens else "stop"
                self.end = DecodeEnd(reason, tuple(self._ids), "".join(self._text),
                                     0.0, (), 0, 0)  # fmt: skip
            raise
        self._count += 1
        self._text.append(piece.text)
        self._ids.append(piece.token_id)
        return piece

    async def aclose(self) -> None:
        await self._pieces.aclose()  # type: ignore[attr-defined]


class FakeLLM(_Delayed):
    """Sequences of token ids; ``decode`` writes lines derived from a hash of the prompt.

    The first line is "yes ..." or "no ...", then one to four item lines, streamed in
    pieces of five characters (one "token" each) so a PartialDecode really sees items arrive
    one by one. A fake has no compute to schedule: tokens of ``prefill_when_idle`` go in with
    the sequence's next call (``prefill_calls`` records each prefill's token count).
    """

    kind = "llm"

    def __init__(self, delay_s: float = 0.0, name: str = "llm") -> None:
        super().__init__(delay_s)
        self.name = name
        self.tokenizer = RegexTokenizer()
        self._seqs: dict[int, list[int]] = {}
        self._held: dict[int, list[int]] = {}
        self._next = 0
        self.prefill_calls: list[int] = []
        self.order: StepOrder | None = None

    def set_step_order(self, order: StepOrder | None) -> None:
        self.order = order  # nothing to order: every call runs at once

    def kv_usage(self) -> float:
        return 0.0

    @property
    def open_sequences(self) -> int:
        return len(self._seqs)

    async def open(self) -> int:
        self._next += 1
        self._seqs[self._next] = []
        return self._next

    def _tokens(self, seq: int) -> list[int]:
        if seq not in self._seqs:
            raise KeyError(f"unknown or closed sequence {seq}")
        return self._seqs[seq]

    async def prefill(self, seq: int, tokens: list[int], *, info: Any = None) -> None:
        held = self._held.pop(seq, [])
        self._tokens(seq)
        await self._work()
        self._seqs[seq].extend(held + list(tokens))
        self.prefill_calls.append(len(held) + len(tokens))

    def prefill_when_idle(self, seq: int, tokens: list[int], *, info: Any = None) -> None:
        self._tokens(seq)
        self._held.setdefault(seq, []).extend(tokens)

    async def _take_held(self, seq: int) -> None:
        if seq in self._held:
            await self.prefill(seq, [], info=None)

    def prompt_text(self, seq: int) -> str:
        return self.tokenizer.decode(self._tokens(seq))

    def answer(self, prompt: str) -> str:
        """The full text ``decode`` writes after ``prompt``."""
        h = _digest(self.name, prompt)
        head = "yes" if h[0] % 2 == 0 else "no"
        lines = [f"{head} {h[:3].hex()}"] + [
            f"item {h[i + 3 : i + 5].hex()} {i}" for i in range(1 + h[1] % 4)
        ]
        return "\n".join(lines)

    def decode(self, seq: int, params: SamplingParams, *, info: Any = None) -> PieceStream:
        self._tokens(seq)
        return PieceStream(self._decode(seq, params), params)

    async def _decode(self, seq: int, params: SamplingParams) -> AsyncIterator[DecodePiece]:
        await self._take_held(seq)
        text = self.answer(self.prompt_text(seq))
        cuts = [i for i in (text.find(s) for s in params.stop) if i >= 0]
        text = text[: min(cuts)] if cuts else text
        limit = min(len(text), CHARS_PER_TOKEN * params.max_tokens)
        for index, start in enumerate(range(0, limit, CHARS_PER_TOKEN)):
            await self._work()
            piece = text[start : start + CHARS_PER_TOKEN]
            as_token = getattr(self.tokenizer, "piece_id", None)  # a test's own tokenizer: none
            yield DecodePiece(as_token(piece) if as_token else index, piece, index)

    async def score(self, seq: int, candidates: list[str], *, info: Any = None) -> list[float]:
        await self._take_held(seq)
        await self._work()
        prompt = self.prompt_text(seq)
        return [-_digest(self.name, prompt, c)[0] / 16 for c in candidates]

    async def close(self, seq: int) -> None:
        self._seqs.pop(seq, None)
        self._held.pop(seq, None)


def fake_vector(text: str, dim: int = 8) -> list[float]:
    """A unit vector from a hash of ``text``."""
    raw = [b - 127.5 for b in _digest("vec", text)[:dim]]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


class FakeEmbedder(_Delayed):
    kind = "embedder"

    async def embed(self, texts: list[str], *, info: Any = None) -> list[list[float]]:
        await self._work()
        return [fake_vector(t) for t in texts]


class FakeIndex(_Delayed):
    """Exact inner-product search over named collections; ties broken by doc id."""

    kind = "index"

    def __init__(
        self, corpus: Iterable[Doc] = (), default: str = "default", delay_s: float = 0.0
    ) -> None:
        super().__init__(delay_s)
        docs = list(corpus)
        self.collections: dict[str, list[tuple[Doc, list[float]]]] = {
            default: [(d, fake_vector(d.text)) for d in docs]
        }

    async def ingest(
        self, collection: str, docs: list[Doc], vectors: Any, *, info: Any = None
    ) -> None:
        await self._work()
        self.collections.setdefault(collection, []).extend(zip(docs, vectors))

    async def search(
        self, collection: str, vectors: Any, k: int, *, info: Any = None
    ) -> list[list[Doc]]:
        await self._work()
        return self.search_now(collection, vectors, k)

    def search_now(self, collection: str, vectors: Any, k: int) -> list[list[Doc]]:
        rows = self.collections[collection]
        out = []
        for v in vectors:
            scored = [(sum(a * b for a, b in zip(v, dv)), d) for d, dv in rows]
            scored.sort(key=lambda s: (-s[0], s[1].id))
            out.append([Doc(d.id, d.text, round(s, 6)) for s, d in scored[:k]])
        return out

    async def drop(self, collection: str) -> None:
        self.collections.pop(collection, None)


class FakeKeywordIndex(_Delayed):
    """Scores by shared lowercase words, ties by doc id."""

    kind = "keyword"

    def __init__(self, corpus: Iterable[Doc], delay_s: float = 0.0) -> None:
        super().__init__(delay_s)
        self.docs = list(corpus)

    async def search(self, queries: list[str], k: int, *, info: Any = None) -> list[list[Doc]]:
        await self._work()
        return self.search_now(queries, k)

    def search_now(self, queries: list[str], k: int) -> list[list[Doc]]:
        out = []
        for q in queries:
            words = set(q.lower().split())
            scored = sorted(
                self.docs, key=lambda d: (-len(words & set(d.text.lower().split())), d.id)
            )
            out.append(scored[:k])
        return out


def fake_rerank(request: RerankRequest) -> list[Doc]:
    """The fake reranker's order: a hash of (query, passage), ties by doc id."""
    scored = sorted(request.passages, key=lambda d: (_digest("rr", request.query, d.text), d.id))
    return scored[: request.top_k]


class FakeReranker(_Delayed):
    """Orders passages by a hash of (query, passage)."""

    kind = "reranker"

    async def rerank(
        self, requests: Sequence[RerankRequest], *, info: Any = None
    ) -> list[list[Doc]]:
        await self._work()
        return [fake_rerank(r) for r in requests]


def sample_corpus(n: int = 40) -> list[Doc]:
    """A small deterministic corpus of short passages."""
    topics = ["rivers", "stars", "bread", "engines", "music", "forests", "glass", "trains"]
    return [
        Doc(
            f"doc{i}",
            f"passage {i} about {topics[i % len(topics)]} and {topics[(i * 3) % len(topics)]}",
        )
        for i in range(n)
    ]


def fake_engines(delay_s: float = 0.0, corpus_size: int = 40) -> dict[str, Any]:
    """Engines under the names the built-in apps use."""
    corpus = sample_corpus(corpus_size)
    return {
        "llm": FakeLLM(delay_s, "llm"),
        "judge": FakeLLM(delay_s, "judge"),
        "embedder": FakeEmbedder(delay_s),
        "index": FakeIndex(corpus, delay_s=delay_s),
        "keyword": FakeKeywordIndex(corpus, delay_s),
        "reranker": FakeReranker(delay_s),
    }


def fake_engine(name: str, delay_s: float = 0.0, corpus_size: int = 40) -> Any:
    """The one fake engine that :func:`fake_engines` registers as ``name`` (a factory that a
    remote process can import and call, e.g. to host it in a Ray actor)."""
    return fake_engines(delay_s, corpus_size)[name]
