"""Reranker: order passages by relevance to a query, through a pluggable relevance scorer.

Scorers (all behind :class:`RelevanceScorer`):

* ``cross-encoder:<folder>`` — an ``AutoModelForSequenceClassification`` from a local folder,
  a batching engine over (query, passage) pairs (pairs of many queries share forward passes,
  packed by token budget). Score: the logit (1 label) or the last label's log-probability.
* ``embedding-cosine:<model>`` — the default when no cross-encoder is installed (none ships in
  any PyPI package): cosine of query and whole-passage embeddings from the :class:`Embedder`.
* ``bm25`` — BM25 of the query over its candidates (their own term statistics).
* An LLM scorer (the LLM engine's ``score`` primitive with a yes/no relevance prompt) plugs in
  later as another ``RelevanceScorer``; nothing here changes.

:class:`Reranker` is the plans' reranker engine (``RerankerProtocol``): ``rerank(requests)``
scores every (query, passage) pair of the requests it is given in one scorer batch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .base import BatchConfig, BatchingEngine, EngineStats, LocalEngine
from .embedder import Embedder
from .errors import InvalidRequest, ModelNotFound
from .records import Doc, RerankRequest, reciprocal_rank

logger = logging.getLogger(__name__)


Query = tuple[str, list[str]]  # a query and its candidate passages


@runtime_checkable
class RelevanceScorer(Protocol):
    """Scores passages against their query; higher is more relevant."""

    name: str

    async def score(self, queries: list[Query]) -> list[np.ndarray]:
        """For each (query, passages): float32 ``[len(passages)]``, in one batch."""
        ...

    def stats(self) -> EngineStats: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class RerankResult:
    """Passage indices (into the input list) and their scores, best first."""

    indices: list[int]
    scores: list[float]


@dataclass(frozen=True)
class PairRequest:
    query: str
    passage: str


class CrossEncoderScorer(BatchingEngine[PairRequest, float]):
    """Cross-encoder over (query, passage) pairs, batched by token budget across queries."""

    def __init__(
        self,
        model_path: str | Path,
        max_length: int | None = None,
        max_batch_tokens: int = 8192,
        batch: BatchConfig | None = None,
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        path = Path(model_path)
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"no cross-encoder at {path} (config.json missing)")
        super().__init__(f"cross-encoder:{path.name}", batch)
        self.name = f"cross-encoder:{path.name}"
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            path, dtype=torch.float32
        ).eval()
        limit = getattr(self.model.config, "max_position_embeddings", 512)
        self.max_length = min(max_length or limit, limit)
        if max_batch_tokens < self.max_length:
            raise ValueError(f"max_batch_tokens must be >= max_length ({self.max_length})")
        self.max_batch_tokens = max_batch_tokens
        self.tokenizer.model_max_length = 1 << 30

    async def score(self, queries: list[Query]) -> list[np.ndarray]:
        pairs = [PairRequest(q, p) for q, passages in queries for p in passages]
        flat = np.asarray(await self.submit_many(pairs), dtype=np.float32)
        return _split(flat, [len(passages) for _, passages in queries])

    def validate(self, request: PairRequest) -> None:
        if not request.query.strip():
            raise InvalidRequest("empty query")
        if not request.passage.strip():
            raise InvalidRequest("empty passage")

    def on_worker_start(self) -> None:
        if self.batch_config.num_threads is not None:
            import torch

            torch.set_num_threads(self.batch_config.num_threads)

    def run_batch(self, requests: list[PairRequest]) -> list[float]:
        import torch

        enc = self.tokenizer(
            [r.query for r in requests],
            [r.passage for r in requests],
            truncation="longest_first",
            max_length=self.max_length,
        )
        ids = enc["input_ids"]
        types = enc.get("token_type_ids")
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        out = np.empty(len(ids), dtype=np.float32)
        start = 0
        while start < len(order):
            longest = len(ids[order[start]])
            size = max(1, self.max_batch_tokens // longest)
            group = order[start : start + size]
            feats = {"input_ids": [ids[i] for i in group]}
            if types is not None:
                feats["token_type_ids"] = [types[i] for i in group]
            padded = self.tokenizer.pad(feats, return_tensors="pt")
            with torch.inference_mode():
                logits = self.model(**padded).logits.float()
            if logits.shape[1] == 1:
                scores = logits[:, 0]
            else:
                scores = torch.log_softmax(logits, dim=1)[:, -1]
            out[group] = scores.numpy()
            start += size
        return [float(s) for s in out]


class EmbeddingScorer:
    """Cosine similarity of query and passage embeddings (the no-cross-encoder default)."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.name = f"embedding-cosine:{embedder.model_name}"

    async def score(self, queries: list[Query]) -> list[np.ndarray]:
        texts = [t for q, passages in queries for t in (q, *passages)]
        vectors = await self.embedder.embed(texts)
        if not self.embedder.normalize:
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        out, start = [], 0
        for _, passages in queries:
            query, rows = vectors[start], vectors[start + 1 : start + 1 + len(passages)]
            out.append((rows @ query).astype(np.float32))
            start += 1 + len(passages)
        return out

    def stats(self) -> EngineStats:
        return self.embedder.stats()

    def close(self) -> None:
        """The embedder is its owner's to close."""


class LexicalScorer:
    """BM25 of the query over the passages given (``bm25s``; their own term statistics): a
    signal the embedding search did not already use. Milliseconds for tens of passages."""

    name = "bm25"

    def __init__(self) -> None:
        self._stats = EngineStats(self.name)

    async def score(self, queries: list[Query]) -> list[np.ndarray]:
        import asyncio

        return await asyncio.to_thread(lambda: [self._score(q, p) for q, p in queries])

    @staticmethod
    def _score(query: str, passages: list[str]) -> np.ndarray:
        from .keyword_index import _bm25s

        bm25s = _bm25s()
        corpus = bm25s.tokenize(passages, stopwords="en", show_progress=False)
        retriever = bm25s.BM25()
        retriever.index(corpus, show_progress=False)
        query_tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not query_tokens.vocab:
            return np.zeros(len(passages), np.float32)
        ids, scores = retriever.retrieve(query_tokens, k=len(passages), show_progress=False)
        out = np.zeros(len(passages), np.float32)
        out[ids[0]] = scores[0]
        return out

    def stats(self) -> EngineStats:
        return self._stats

    def close(self) -> None:
        """Nothing to release."""


def _split(flat: np.ndarray, lengths: list[int]) -> list[np.ndarray]:
    out, start = [], 0
    for n in lengths:
        out.append(flat[start : start + n])
        start += n
    return out


class Reranker(LocalEngine):
    """The plans' reranker engine over a :class:`RelevanceScorer`.

    ``rerank(requests)`` scores each request's passages against its query (all requests' pairs
    in one scorer batch) and returns each request's ``top_k`` passages, best first, with their
    scores. ``fuse``: the scorer's order and the order the passages came in (the retrieval's,
    fused by rank upstream) are fused by reciprocal rank, so a scorer that sees other evidence
    than the search (BM25 words, a cross-encoder) moves passages up or down without discarding
    what the search knew; a passage's score is then its fused score.
    """

    kind = "reranker"

    def __init__(self, backend: RelevanceScorer, fuse: bool = False) -> None:
        self.backend = backend
        self.fuse = fuse
        logger.info("reranker scorer: %s%s", backend.name, " (fused by rank)" if fuse else "")

    @property
    def scorer(self) -> str:
        return self.backend.name

    @classmethod
    def from_model(
        cls, path: str | Path | None = None, embedder: Embedder | None = None
    ) -> Reranker:
        """A cross-encoder from ``path``; without one, embedding cosine via ``embedder``
        (the default all-MiniLM-L6-v2 is loaded when none is given)."""
        if path is not None:
            return cls(CrossEncoderScorer(path))
        logger.info("no cross-encoder given: reranking by embedding cosine")
        return cls(EmbeddingScorer(embedder or Embedder.from_model()))

    @classmethod
    def of_kind(cls, kind: str, embedder: Embedder | None = None) -> Reranker:
        """``"embedding"`` (cosine under ``embedder``), ``"bm25"`` (fused by rank with the
        retrieval's order) or a cross-encoder folder."""
        if kind == "bm25":
            return cls(LexicalScorer(), fuse=True)
        if kind == "embedding":
            return cls.from_model(embedder=embedder)
        return cls.from_model(kind)

    async def rerank(
        self, requests: Sequence[RerankRequest], *, info: Any = None
    ) -> list[list[Doc]]:
        """Each request's ``top_k`` passages by relevance, best first.

        Raises ``InvalidRequest`` for an empty query or an empty passage.
        """
        for r in requests:
            if not r.query.strip():
                raise InvalidRequest("cannot rerank for an empty query")
            for i, p in enumerate(r.passages):
                if not isinstance(p.text, str) or not p.text.strip():
                    raise InvalidRequest(f"passage {i} ({p.id!r}) is empty")
        todo = [r for r in requests if r.passages]
        scores = iter(
            await self.backend.score([(r.query, [p.text for p in r.passages]) for r in todo])
        )
        return [self._top(r, next(scores)) if r.passages else [] for r in requests]

    def _top(self, request: RerankRequest, scores: np.ndarray) -> list[Doc]:
        passages, k = request.passages, request.top_k
        if not self.fuse:
            order = np.argsort(-scores, kind="stable")[:k]
            return [
                Doc(passages[i].id, passages[i].text, round(float(scores[i]), 6)) for i in order
            ]
        fused = [reciprocal_rank(i) for i in range(len(passages))]  # the retrieval's order
        for rank, i in enumerate(np.argsort(-scores, kind="stable")):
            fused[int(i)] += reciprocal_rank(rank)
        best = sorted(range(len(passages)), key=lambda i: (-fused[i], i))[:k]
        return [Doc(passages[i].id, passages[i].text, round(fused[i], 6)) for i in best]

    def stats(self) -> EngineStats:
        return self.backend.stats()

    async def stop(self) -> None:
        self.close()

    def close(self) -> None:
        self.backend.close()
