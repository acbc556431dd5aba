"""The engine interfaces a plan targets (names and calls only; the engines live in ayo.engines).

The executor calls exactly these methods, so any object with them can stand in for an engine:
the real engines, the deterministic fakes in ``ayo.scheduler.sim.fakes``, or remote proxies.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .prompt import Tokenizer
from .values import Doc

Vector = Sequence[float]


@dataclass(frozen=True)
class Sampling:
    """How tokens are chosen, as the OpenAI API names it: ``temperature`` 0 is greedy (the
    default: optimized and unoptimized plans then give equal answers); ``top_p`` keeps the
    smallest set of tokens with that much probability; ``seed`` makes sampling reproducible.
    Penalties discourage repeats: ``repetition_penalty`` (> 1, transformers' rule: divides a
    positive logit, multiplies a negative one, of every token in the prompt or the answer so
    far), ``frequency_penalty`` (subtracted once per earlier occurrence in the answer) and
    ``presence_penalty`` (subtracted once if it occurred in the answer)."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0

    def __post_init__(self) -> None:
        checks = (
            ("temperature", 0 <= self.temperature <= 2, "in [0, 2]"),
            ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
            ("repetition_penalty", 0 < self.repetition_penalty <= 2, "in (0, 2]"),
            ("frequency_penalty", -2 <= self.frequency_penalty <= 2, "in [-2, 2]"),
            ("presence_penalty", -2 <= self.presence_penalty <= 2, "in [-2, 2]"),
        )
        for name, ok, allowed in checks:
            if not ok:  # NaN fails every comparison, so it lands here too
                raise ValueError(f"{name} must be {allowed}, got {getattr(self, name)}")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed}")


GREEDY = Sampling()


@dataclass(frozen=True)
class DecodeParams:
    """What ``LLM.decode`` generates: at most ``max_tokens`` tokens, ending early at the
    model's end-of-turn token or before the first of the ``stop`` strings."""

    max_tokens: int
    stop: tuple[str, ...] = ()
    sampling: Sampling = GREEDY

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif not isinstance(self.stop, tuple):
            object.__setattr__(self, "stop", tuple(self.stop))
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop strings must be non-empty strings, got {self.stop!r}")


class LLM(Protocol):
    """Prefill / decode on live sequences (Prefill, PartialPrefill, FullPrefill, Decode,
    PartialDecode). ``decode`` yields pieces that are ``str`` or have a ``text`` attribute.

    Optional: an LLM with ``set_step_order(order)`` lets the runtime's policy order its steps
    (``LLMEngine.set_step_order``); its ``prefill``, ``decode`` and ``score`` then also take an
    ``info=`` keyword (the calling primitive's request). One without it is called as above."""

    tokenizer: Tokenizer

    async def open(self) -> Any: ...
    async def prefill(self, seq: Any, tokens: list[int]) -> None: ...
    def decode(self, seq: Any, params: DecodeParams) -> AsyncIterator[Any]: ...
    async def score(self, seq: Any, candidates: list[str]) -> list[float]:
        """The log-probability of each candidate text as the continuation of ``seq`` (Score)."""
        ...

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
