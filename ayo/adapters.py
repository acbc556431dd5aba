"""Adapters from Ayo's embedded engines (``ayo.engines``) to the interfaces plans call
(``ayo.scheduler.ir.engine_api``).

- :class:`LLMAdapter`: ``LLMEngine`` (token ids in, pieces out; ``kv_usage`` for balancing).
- :class:`EmbedderAdapter`: ``Embedder`` (numpy rows out).
- :class:`StoreIndex`: dense search over a ``RetrievalStore``'s collections (chunks as docs);
  per-query collections (``Ingest`` of a query's own documents) live in memory, exact inner
  product, and are dropped with the query.
- :class:`StoreKeywordIndex`: BM25 over one of the store's collections.
- :class:`RerankerAdapter`: ``Reranker`` over ``Doc`` passages.

Heavy modules (torch, transformers, faiss) load only when an adapter is built.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

from ayo.scheduler import DecodeParams, Doc
from ayo.scheduler.ir.functions import reciprocal_rank


class EngineTokenizer:
    """``encode`` without special tokens (plans render whole prompts), ``decode`` back."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def encode(self, text: str) -> list[int]:
        return self._engine.encode(text) if text else []

    def decode(self, ids: list[int]) -> str:
        return self._engine.tokenizer.decode(ids)

    def render_chat(self, messages: list[dict[str, str]]) -> str | None:
        """``messages`` in the model's chat template up to where the answer starts (None: the
        model has no template, so prompts stay plain text)."""
        tok = self._engine.tokenizer
        if tok is None or getattr(tok, "chat_template", None) is None:
            return None
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


class LLMAdapter:
    """An ``LLMEngine`` as the plans' ``LLM``; ``start``/``stop`` run its worker thread.

    ``max_new_tokens`` caps every decode (None: each plan's own ``max_tokens``), e.g. to keep
    a CPU benchmark tractable; the cap applies to optimized and unoptimized plans alike.
    """

    def __init__(self, engine: Any, max_new_tokens: int | None = None) -> None:
        if max_new_tokens is not None and max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1 or None, got {max_new_tokens}")
        self.engine = engine
        self.tokenizer = EngineTokenizer(engine)
        self.max_new_tokens = max_new_tokens

    async def start(self) -> None:
        await self.engine.start()

    async def stop(self) -> None:
        await self.engine.stop()

    def kv_usage(self) -> float:
        stats = self.engine.stats()
        return stats.used_blocks / max(1, stats.num_blocks)

    async def open(self) -> Any:
        return await self.engine.open()

    def set_step_order(self, order: Any) -> None:
        """The runtime's policy orders the engine's steps (``LLMEngine.set_step_order``)."""
        self.engine.set_step_order(order)

    async def prefill(self, seq: Any, tokens: list[int], info: Any = None) -> None:
        await self.engine.prefill(seq, list(tokens), info=info)

    def sampling_params(self, params: DecodeParams) -> Any:
        """The engine's ``SamplingParams`` for a plan's ``params`` (capped by max_new_tokens)."""
        from ayo.engines.llm import SamplingParams

        limit = params.max_tokens
        if self.max_new_tokens is not None:
            limit = min(limit, self.max_new_tokens)
        s = params.sampling
        return SamplingParams(
            max_tokens=limit,
            stop=params.stop,
            temperature=s.temperature,
            top_p=s.top_p,
            seed=s.seed,
            repetition_penalty=s.repetition_penalty,
            frequency_penalty=s.frequency_penalty,
            presence_penalty=s.presence_penalty,
        )

    async def decode(self, seq: Any, params: DecodeParams, info: Any = None) -> AsyncIterator[str]:
        stream = self.engine.decode(seq, self.sampling_params(params), info=info)
        async with contextlib.aclosing(stream) as pieces:
            async for piece in pieces:
                if piece.text:
                    yield piece.text

    async def score(self, seq: Any, candidates: list[str], info: Any = None) -> list[float]:
        scores = await self.engine.score(seq, list(candidates), info=info)
        return [s.logprob for s in scores]

    async def close(self, seq: Any) -> None:
        await self.engine.close(seq)


class EmbedderAdapter:
    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        return list(await self.embedder.embed(list(texts)))


def _hit_doc(hit: Any) -> Doc:
    return Doc(f"{hit.doc_key}#{hit.chunk_id}", hit.text, round(float(hit.score), 6))


def _missing(collection: str, store: Any) -> ValueError:
    return ValueError(
        f"collection {collection!r} is not in the data directory {store.data_dir}: ingest it "
        f"with `python -m ayo.ingest wiki --collection {collection} --data-dir {store.data_dir}` "
        "(or start `python -m ayo.server` once on that data directory)"
    )


class StoreIndex:
    """Dense search over ``store`` collections (the plans' ``default`` is ``collection``);
    in-memory collections for per-query documents."""

    def __init__(self, store: Any, collection: str = "default") -> None:
        self.store = store
        self.collection = collection
        self._memory: dict[str, tuple[list[Doc], np.ndarray]] = {}

    async def search(self, collection: str, vectors: list[Any], k: int) -> list[list[Doc]]:
        queries = np.asarray(vectors, dtype=np.float32)
        if collection in self._memory:
            docs, matrix = self._memory[collection]
            scores = queries @ matrix.T
            order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
            return [
                [Doc(docs[j].id, docs[j].text, round(float(s[j]), 6)) for j in row]
                for row, s in zip(order, scores)
            ]
        name = self.collection if collection == "default" else collection
        if not self.store.vectors.has_collection(name):
            raise _missing(name, self.store)
        hits = await self.store.search_vectors(name, queries, k)
        return [[_hit_doc(h) for h in per_query] for per_query in hits]

    async def ingest(self, collection: str, docs: list[Doc], vectors: list[Any]) -> None:
        if self.store.vectors.has_collection(collection):
            raise ValueError(
                f"collection {collection!r} is a stored collection: add documents to it with "
                "`python -m ayo ingest`, not from a query"
            )
        new = np.asarray(vectors, dtype=np.float32).reshape(len(docs), -1)
        old_docs, old = self._memory.get(collection, ([], np.zeros((0, new.shape[1]), np.float32)))
        self._memory[collection] = (old_docs + list(docs), np.concatenate([old, new]))

    async def drop(self, collection: str) -> None:
        self._memory.pop(collection, None)

    @property
    def temp_collections(self) -> int:
        return len(self._memory)


class StoreKeywordIndex:
    """BM25 over the store's collection ``collection``."""

    def __init__(self, store: Any, collection: str = "default") -> None:
        self.store = store
        self.collection = collection

    async def search(self, queries: list[str], k: int) -> list[list[Doc]]:
        if not self.store.vectors.has_collection(self.collection):
            raise _missing(self.collection, self.store)
        hits = await self.store.keyword_search(self.collection, list(queries), k)
        return [[_hit_doc(h) for h in per_query] for per_query in hits]


class RerankerAdapter:
    """A ``Reranker`` over ``Doc`` passages. ``fuse``: the reranker's order and the order the
    passages came in (the retrieval's, fused by rank upstream) are fused by reciprocal rank,
    so a scorer that sees other evidence than the search (BM25 words, a cross-encoder) moves
    passages up or down without discarding what the search knew."""

    def __init__(self, reranker: Any, fuse: bool = False) -> None:
        self.reranker = reranker
        self.fuse = fuse

    async def rerank(self, query: str, passages: list[Doc], top_k: int) -> list[Doc]:
        if not self.fuse:
            result = await self.reranker.rerank(query, [p.text for p in passages], top_k)
            return [
                Doc(passages[i].id, passages[i].text, round(float(s), 6))
                for i, s in zip(result.indices, result.scores)
            ]
        result = await self.reranker.rerank(query, [p.text for p in passages], None)
        fused = [reciprocal_rank(i) for i in range(len(passages))]  # the retrieval's order
        for rank, i in enumerate(result.indices):
            fused[i] += reciprocal_rank(rank)
        order = sorted(range(len(passages)), key=lambda i: (-fused[i], i))[:top_k]
        return [Doc(passages[i].id, passages[i].text, round(fused[i], 6)) for i in order]


def _reranker(kind: str, embedder: Any) -> RerankerAdapter:
    from ayo.engines import Reranker
    from ayo.engines.reranker import LexicalScorer

    if kind == "bm25":
        return RerankerAdapter(Reranker(LexicalScorer()), fuse=True)
    if kind == "embedding":
        return RerankerAdapter(Reranker.from_model(embedder=embedder))
    return RerankerAdapter(Reranker.from_model(kind))


def default_engines(
    data_dir: str | Path | None = None,
    collection: str = "wiki",
    llm: str = "smollm2-135m-instruct",
    *,
    embedder_threads: int | None = None,
    max_new_tokens: int | None = None,
    reranker: str = "embedding",
    **llm_config: Any,
) -> dict[str, object]:
    """The embedded engines under the names the built-in apps use (``llm`` and ``judge`` share
    one LLM engine). ``data_dir``: the RetrievalStore folder (default ``$AYO_DATA_DIR``, else
    ``$XDG_CACHE_HOME/ayo`` or ``~/.cache/ayo``, as ``python -m ayo.ingest``); ``collection``: the stored collection
    the apps search when a query brings no documents (``default``).

    Compute budgets (a CPU shares its cores between the engines): ``embedder_threads`` are the
    torch threads of the embedder's worker (the default reranker embeds through it too);
    ``llm_config`` takes the LLM's :class:`~ayo.engines.llm.EngineConfig` fields, e.g.
    ``num_threads`` and ``dtype``. ``max_new_tokens`` caps every decode (see
    :class:`LLMAdapter`). ``reranker``: ``"embedding"`` (cosine of the question and each
    candidate under the retrieval embedder: one consistent score for hits of several queries),
    ``"bm25"`` (BM25 of the question over the candidates, fused by rank with the retrieval's
    order) or a cross-encoder folder. On ``benchmarks.quality``'s questions the embedding
    reranker kept the gold article in advanced_rag's top 3 as often as the question's own
    dense search (74/76); BM25 fused in lost it more often (63-66/76).

    Raises:
        RuntimeError: naming the engine or package that is missing.
    """
    try:
        from ayo.engines import BatchConfig, Embedder, RetrievalStore
        from ayo.engines.llm import LLMEngine
    except ImportError as exc:
        raise RuntimeError(f"App.default() needs the embedded engines: {exc}") from exc
    try:
        embedder = Embedder.from_model(batch=BatchConfig(num_threads=embedder_threads))
        engine = LLMEngine.from_model(llm, **llm_config)
    except Exception as exc:  # a missing model package: say which
        raise RuntimeError(f"App.default() could not load a model: {exc}") from exc
    if data_dir is None:
        from ayo.ingest import default_data_dir

        data_dir = default_data_dir()
    store = RetrievalStore(data_dir, embedder)
    llm_adapter = LLMAdapter(engine, max_new_tokens)
    return {
        "llm": llm_adapter,
        "judge": llm_adapter,
        "embedder": EmbedderAdapter(embedder),
        "index": StoreIndex(store, collection),
        "keyword": StoreKeywordIndex(store, collection),
        "reranker": _reranker(reranker, embedder),
    }


def default_llm(
    llm: str = "smollm2-135m-instruct", max_new_tokens: int | None = None, **llm_config: Any
) -> LLMAdapter:
    """The embedded LLM alone, as :func:`default_engines` registers it (a factory a remote
    process can call: ``functools.partial(default_llm, dtype="float32")``)."""
    from ayo.engines.llm import LLMEngine

    return LLMAdapter(LLMEngine.from_model(llm, **llm_config), max_new_tokens)


def default_embedder(
    embedder_threads: int | None = None, model: str = "all-minilm-l6-v2"
) -> EmbedderAdapter:
    """The embedded embedder alone (or ``model``, a sentence-transformers folder), as
    :func:`default_engines` registers it."""
    from ayo.engines import BatchConfig, Embedder

    batch = BatchConfig(num_threads=embedder_threads)
    return EmbedderAdapter(Embedder.from_model(model, batch=batch))


def default_reranker(
    embedder: str = "all-minilm-l6-v2", kind: str = "embedding"
) -> RerankerAdapter:
    """The reranker alone, as :func:`default_engines` registers it (the embedding reranker
    loads its own ``embedder``: a factory for a remote node)."""
    from ayo.engines import Embedder

    return _reranker(kind, Embedder.from_model(embedder) if kind == "embedding" else None)
