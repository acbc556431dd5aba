"""Reranker: order passages by relevance to a query, through a pluggable relevance scorer.

Scorers (all behind :class:`RelevanceScorer`):

* ``cross-encoder:<folder>`` — an ``AutoModelForSequenceClassification`` from a local folder,
  a batching engine over (query, passage) pairs (pairs of many queries share forward passes,
  packed by token budget). Score: the logit (1 label) or the last label's log-probability.
* ``embedding-cosine:<model>`` — the default when no cross-encoder is installed (none ships in
  any PyPI package): cosine of query and whole-passage embeddings from the :class:`Embedder`.
* An LLM scorer (the LLM engine's ``score`` primitive with a yes/no relevance prompt) plugs in
  later as another ``RelevanceScorer``; nothing here changes.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from .base import BatchConfig, BatchingEngine, EngineStats
from .embedder import Embedder
from .errors import InvalidRequest, ModelNotFound

logger = logging.getLogger(__name__)


@runtime_checkable
class RelevanceScorer(Protocol):
    """Scores passages against a query; higher is more relevant."""

    name: str

    async def score(self, query: str, passages: list[str]) -> np.ndarray:
        """float32 ``[len(passages)]``."""
        ...

    def stats(self) -> EngineStats: ...


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

    async def score(self, query: str, passages: list[str]) -> np.ndarray:
        results = await self.submit_many([PairRequest(query, p) for p in passages])
        return np.asarray(results, dtype=np.float32)

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

    async def score(self, query: str, passages: list[str]) -> np.ndarray:
        vectors = await self.embedder.embed([query, *passages])
        if not self.embedder.normalize:
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return (vectors[1:] @ vectors[0]).astype(np.float32)

    def stats(self) -> EngineStats:
        return self.embedder.stats()


class LexicalScorer:
    """BM25 of the query over the passages given (``bm25s``; their own term statistics): a
    signal the embedding search did not already use. Milliseconds for tens of passages."""

    name = "bm25"

    def __init__(self) -> None:
        self._stats = EngineStats(self.name)

    async def score(self, query: str, passages: list[str]) -> np.ndarray:
        import asyncio

        return await asyncio.to_thread(self._score, query, passages)

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


class Reranker:
    """``await rerank(query, passages, top_k)`` -> :class:`RerankResult`, best first.

    ``scorer`` names the scorer in use (also logged at construction).
    """

    def __init__(self, backend: RelevanceScorer) -> None:
        self.backend = backend
        logger.info("reranker scorer: %s", backend.name)

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

    async def rerank(
        self, query: str, passages: list[str], top_k: int | None = None
    ) -> RerankResult:
        """Score every passage against ``query``; return the ``top_k`` best (all when None).

        Raises ``InvalidRequest`` for an empty query, an empty passage or ``top_k < 1``.
        """
        if not query.strip():
            raise InvalidRequest("cannot rerank for an empty query")
        if top_k is not None and top_k < 1:
            raise InvalidRequest(f"top_k must be >= 1, got {top_k}")
        if not passages:
            return RerankResult([], [])
        for i, p in enumerate(passages):
            if not isinstance(p, str) or not p.strip():
                raise InvalidRequest(f"passage {i} is empty")
        scores = await self.backend.score(query, passages)
        order = np.argsort(-scores, kind="stable")[: top_k or len(passages)]
        return RerankResult([int(i) for i in order], [float(scores[i]) for i in order])

    def stats(self) -> EngineStats:
        return self.backend.stats()

    def close(self) -> None:
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()
