"""What a plan may ask of each engine kind: the one interface between the runtime and an engine.

One protocol per engine kind states every method a plan may call (``LLMProtocol``,
``EmbedderProtocol``, ``VectorIndexProtocol``, ``KeywordIndexProtocol``, ``RerankerProtocol``);
:class:`Engine` states what the runtime does with any engine instance (its declared ``kind``,
start, stop, health). The engines implement both themselves, structurally (``ayo.engines``
never imports the scheduler): ``LLMEngine``, ``Embedder``, ``Reranker``, ``CollectionIndex``,
``CollectionKeywordIndex``, the fakes and simulated engines of ``ayo.scheduler.sim``, and a
``RemoteEngine`` in a Ray actor. The runtime's batching proxies, which stand between a plan
and the engines, implement the kind protocols too, so a plan runs on either. A static check
(``tests/static/conformance.py`` under mypy, run by the test suite) proves each one satisfies
its protocols. Nothing is probed at run time: what an engine can do is what its protocol says.

``info`` is required wherever an engine computes on a request's behalf: the calling
primitive's scheduling facts (query, node, depth, remaining critical path, deadline), which
the runtime builds and an engine may read (an LLM's step order does) or ignore; None when the
caller is not the runtime (a script, a test).

The values that cross this interface are the engines' own types: token ids, texts, vectors,
:class:`~ayo.engines.records.Doc` passages, the one sampling type
:class:`~ayo.engines.llm.sampling.SamplingParams`, decode pieces and their end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from ayo.engines.llm.outputs import DecodeEnd, DecodePiece
from ayo.engines.llm.sampling import SamplingParams
from ayo.engines.records import Doc, RerankRequest

from .prompt import Tokenizer

KINDS = ("llm", "embedder", "index", "keyword", "reranker")


class Rows(Protocol):
    """Vectors, one row per text: a list of lists or a 2-D numpy array."""

    def __len__(self) -> int: ...
    def __getitem__(self, i: Any, /) -> Any: ...
    def __iter__(self) -> Iterator[Any]: ...


StepOrder = Callable[[list[Any]], list[Any]]


@runtime_checkable
class Engine(Protocol):
    """What every engine instance declares and does, whatever its kind.

    Attributes:
        kind: which protocol below it implements (one of ``KINDS``).
    """

    kind: str

    async def start(self) -> None:
        """Start workers (threads, a remote actor); idempotent."""
        ...

    async def stop(self) -> None:
        """Stop them; requests still pending fail."""
        ...

    async def health(self, timeout_s: float = 2.0) -> dict[str, Any]:
        """As ``/health`` lists the instance: ``where`` (``local`` or ``remote``), ``state``
        (``alive``, ``down`` or ``stopped``), and for a remote one its node and process."""
        ...


class DecodeStreamProtocol(Protocol):
    """What ``decode`` returns: the pieces as they are written, then ``end`` (why it finished,
    how many tokens) once the iteration is over. Leaving early (``aclose``) stops the decode."""

    @property
    def end(self) -> DecodeEnd | None: ...

    def __aiter__(self) -> AsyncIterator[DecodePiece]: ...
    async def __anext__(self) -> DecodePiece: ...
    async def aclose(self) -> None: ...


class LLMProtocol(Protocol):
    """Live sequences whose KV stays in the engine between calls: Prefill, PartialPrefill,
    FullPrefill, Decode, PartialDecode and Score are these calls in the right order.

    Attributes:
        tokenizer: text to token ids (no special tokens) and back, chat messages to a prompt.
    """

    @property
    def tokenizer(self) -> Tokenizer: ...

    def set_step_order(self, order: StepOrder | None) -> None:
        """Rank the sequences with work in each engine step (by their latest ``info``), first
        served first; None: arrival order."""
        ...

    def kv_usage(self) -> float:
        """The share of the KV cache in use, 0..1 (replicas are balanced by it)."""
        ...

    def open(self) -> Awaitable[Any]:
        """A new, empty sequence (an opaque handle)."""
        ...

    def prefill(self, seq: Any, tokens: list[int], *, info: Any) -> Awaitable[None]:
        """Append ``tokens`` and return once their KV is computed."""
        ...

    def prefill_when_idle(self, seq: Any, tokens: list[int], *, info: Any) -> None:
        """Append ``tokens`` without waiting: computed when the engine has nothing else to do,
        or with the sequence's next prefill or decode if that comes first. An error surfaces
        at the sequence's next call."""
        ...

    def decode(self, seq: Any, params: SamplingParams, *, info: Any) -> DecodeStreamProtocol:
        """Generate on ``seq`` under ``params`` (stops at ``max_tokens``, end of turn or a
        stop string)."""
        ...

    def score(self, seq: Any, candidates: list[str], *, info: Any) -> Awaitable[list[float]]:
        """The log-probability of each candidate text as the continuation of ``seq``."""
        ...

    def close(self, seq: Any) -> Awaitable[None]:
        """Release the sequence (its full KV blocks stay in the prefix cache); idempotent."""
        ...


class EmbedderProtocol(Protocol):
    """Embed: one vector per text."""

    def embed(self, texts: list[str], *, info: Any) -> Awaitable[Rows]: ...


class VectorIndexProtocol(Protocol):
    """Search and Ingest over named collections of passages."""

    def search(
        self, collection: str, vectors: Rows, k: int, *, info: Any
    ) -> Awaitable[list[list[Doc]]]:
        """The top ``k`` passages of ``collection`` for each query vector, best first."""
        ...

    def ingest(
        self, collection: str, docs: list[Doc], vectors: Rows, *, info: Any
    ) -> Awaitable[None]:
        """Add ``docs`` (one vector each) to ``collection`` (a per-query one is created)."""
        ...

    def drop(self, collection: str) -> Awaitable[None]:
        """Forget a per-query collection (its query has ended)."""
        ...


class KeywordIndexProtocol(Protocol):
    """KeywordSearch: the top ``k`` passages for each query text."""

    def search(self, queries: list[str], k: int, *, info: Any) -> Awaitable[list[list[Doc]]]: ...


class RerankerProtocol(Protocol):
    """Rerank: for each request, its ``top_k`` passages most relevant to its query, best
    first. Several requests in one call are scored in one batch."""

    def rerank(
        self, requests: Sequence[RerankRequest], *, info: Any
    ) -> Awaitable[list[list[Doc]]]: ...


PROTOCOLS: dict[str, type] = {
    "llm": LLMProtocol,
    "embedder": EmbedderProtocol,
    "index": VectorIndexProtocol,
    "keyword": KeywordIndexProtocol,
    "reranker": RerankerProtocol,
}


def engine_kind(engine: Any) -> str:
    """The kind ``engine`` declares; a clear error for an object that declares none."""
    kind = getattr(engine, "kind", None) if isinstance(engine, Engine) else None
    if kind not in KINDS:
        raise TypeError(
            f"{type(engine).__name__} is not an engine: it must declare kind (one of {KINDS}) "
            "and implement start, stop and health with the methods of its kind's protocol "
            "(ayo.scheduler.ir.engine_api)"
        )
    return kind


__all__ = [
    "KINDS",
    "PROTOCOLS",
    "DecodeEnd",
    "DecodePiece",
    "DecodeStreamProtocol",
    "Doc",
    "EmbedderProtocol",
    "Engine",
    "KeywordIndexProtocol",
    "LLMProtocol",
    "RerankRequest",
    "RerankerProtocol",
    "Rows",
    "SamplingParams",
    "StepOrder",
    "Tokenizer",
    "VectorIndexProtocol",
    "engine_kind",
]
