"""The engine interfaces a plan targets (names and calls only; the engines live in ayo.engines).

The executor calls exactly these methods, so any object with them can stand in for an engine:
the real engines, the deterministic fakes in ``ayo.scheduler.fakes``, or remote proxies.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .prompt import Tokenizer
from .values import Doc

Vector = Sequence[float]


@dataclass(frozen=True)
class DecodeParams:
    """Greedy decoding limits passed to ``LLM.decode``."""

    max_tokens: int
    stop: tuple[str, ...] = ()


class LLM(Protocol):
    """Prefill / decode on live sequences (Prefill, PartialPrefill, FullPrefill, Decode,
    PartialDecode). ``decode`` yields pieces that are ``str`` or have a ``text`` attribute."""

    tokenizer: Tokenizer

    async def open(self) -> Any: ...
    async def prefill(self, seq: Any, tokens: list[int]) -> None: ...
    def decode(self, seq: Any, params: DecodeParams) -> AsyncIterator[Any]: ...
    async def close(self, seq: Any) -> None: ...


class Embedder(Protocol):
    """Embed: one vector per text."""

    async def embed(self, texts: list[str]) -> list[Vector]: ...


class VectorIndex(Protocol):
    """Search and Ingest. ``search`` returns the top ``k`` docs for each query vector."""

    async def search(self, collection: str, vectors: list[Vector], k: int) -> list[list[Doc]]: ...
    async def ingest(self, collection: str, docs: list[Doc], vectors: list[Vector]) -> None: ...
    async def drop(self, collection: str) -> None: ...


class KeywordIndex(Protocol):
    """KeywordSearch: the top ``k`` docs for each query text."""

    async def search(self, queries: list[str], k: int) -> list[list[Doc]]: ...


class Reranker(Protocol):
    """Rerank: the ``top_k`` passages most relevant to ``query``, best first."""

    async def rerank(self, query: str, passages: list[Doc], top_k: int) -> list[Doc]: ...
