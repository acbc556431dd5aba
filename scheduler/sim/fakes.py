"""Deterministic fake engines with the interfaces of ``engine_api``.

They live in the package, not in tests/, because the runtime reuses them: its tests check that
optimized and unoptimized plans agree, and its simulator gives them a latency (``delay_s``).
Every output is a pure function of the inputs: the fake LLM's text depends on the exact token
sequence prefilled, so a prefill split that changed the prompt by one token changes the answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import AsyncIterator, Iterable

from ..ir.engine_api import DecodeParams
from ..ir.prompt import RegexTokenizer
from ..ir.values import Doc


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x1f".join(parts).encode()).digest()


class _Delayed:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls = 0

    async def _work(self) -> None:
        self.calls += 1
        await asyncio.sleep(self.delay_s)  # simulated compute time (0: just yield to the loop)


class FakeLLM(_Delayed):
    """Sequences of token ids; ``decode`` writes lines derived from a hash of the prompt.

    The first line is "yes ..." or "no ...", then one to four item lines, streamed in
    pieces of a few characters so a PartialDecode really sees items arrive one by one.
    """

    def __init__(self, delay_s: float = 0.0, name: str = "llm") -> None:
        super().__init__(delay_s)
        self.name = name
        self.tokenizer = RegexTokenizer()
        self._seqs: dict[int, list[int]] = {}
        self._next = 0
        self.prefill_calls: list[int] = []

    @property
    def open_sequences(self) -> int:
        return len(self._seqs)

    async def open(self) -> int:
        self._next += 1
        self._seqs[self._next] = []
        return self._next

    async def prefill(self, seq: int, tokens: list[int]) -> None:
        if seq not in self._seqs:
            raise KeyError(f"unknown or closed sequence {seq}")
        await self._work()
        self._seqs[seq].extend(tokens)
        self.prefill_calls.append(len(tokens))

    def prompt_text(self, seq: int) -> str:
        return self.tokenizer.decode(self._seqs[seq])

    def answer(self, prompt: str) -> str:
        """The full text ``decode`` writes after ``prompt``."""
        h = _digest(self.name, prompt)
        head = "yes" if h[0] % 2 == 0 else "no"
        lines = [f"{head} {h[:3].hex()}"] + [
            f"item {h[i + 3 : i + 5].hex()} {i}" for i in range(1 + h[1] % 4)
        ]
        return "\n".join(lines)

    async def decode(self, seq: int, params: DecodeParams) -> AsyncIterator[str]:
        if seq not in self._seqs:
            raise KeyError(f"unknown or closed sequence {seq}")
        text = self.answer(self.prompt_text(seq))
        cuts = [i for i in (text.find(s) for s in params.stop) if i >= 0]
        text = text[: min(cuts)] if cuts else text
        for start in range(0, min(len(text), 5 * params.max_tokens), 5):  # 5 characters a token
            await self._work()
            yield text[start : start + 5]

    async def score(self, seq: int, candidates: list[str]) -> list[float]:
        if seq not in self._seqs:
            raise KeyError(f"unknown or closed sequence {seq}")
        await self._work()
        prompt = self.prompt_text(seq)
        return [-_digest(self.name, prompt, c)[0] / 16 for c in candidates]

    async def close(self, seq: int) -> None:
        self._seqs.pop(seq, None)


def fake_vector(text: str, dim: int = 8) -> list[float]:
    """A unit vector from a hash of ``text``."""
    raw = [b - 127.5 for b in _digest("vec", text)[:dim]]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


class FakeEmbedder(_Delayed):
    async def embed(self, texts: list[str]) -> list[list[float]]:
        await self._work()
        return [fake_vector(t) for t in texts]


class FakeIndex(_Delayed):
    """Exact inner-product search over named collections; ties broken by doc id."""

    def __init__(
        self, corpus: Iterable[Doc] = (), default: str = "default", delay_s: float = 0.0
    ) -> None:
        super().__init__(delay_s)
        docs = list(corpus)
        self.collections: dict[str, list[tuple[Doc, list[float]]]] = {
            default: [(d, fake_vector(d.text)) for d in docs]
        }

    async def ingest(self, collection: str, docs: list[Doc], vectors: list[list[float]]) -> None:
        await self._work()
        self.collections.setdefault(collection, []).extend(zip(docs, vectors))

    async def search(self, collection: str, vectors: list[list[float]], k: int) -> list[list[Doc]]:
        await self._work()
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

    def __init__(self, corpus: Iterable[Doc], delay_s: float = 0.0) -> None:
        super().__init__(delay_s)
        self.docs = list(corpus)

    async def search(self, queries: list[str], k: int) -> list[list[Doc]]:
        await self._work()
        out = []
        for q in queries:
            words = set(q.lower().split())
            scored = sorted(
                self.docs, key=lambda d: (-len(words & set(d.text.lower().split())), d.id)
            )
            out.append(scored[:k])
        return out


class FakeReranker(_Delayed):
    """Orders passages by a hash of (query, passage)."""

    async def rerank(self, query: str, passages: list[Doc], top_k: int) -> list[Doc]:
        await self._work()
        scored = sorted(passages, key=lambda d: (_digest("rr", query, d.text), d.id))
        return scored[:top_k]


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


def fake_engines(delay_s: float = 0.0, corpus_size: int = 40) -> dict[str, object]:
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


def fake_engine(name: str, delay_s: float = 0.0, corpus_size: int = 40) -> object:
    """The one fake engine that :func:`fake_engines` registers as ``name`` (a factory that a
    remote process can import and call, e.g. to host it in a Ray actor)."""
    return fake_engines(delay_s, corpus_size)[name]
