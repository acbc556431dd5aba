"""A tiny deterministic text encoder for store/index tests that need no model."""

from __future__ import annotations

import hashlib
import re

import numpy as np

from ayo.engines.embedder import EmbeddingBatch

_WORD = re.compile(r"\S+")


def hash_vector(text: str, dim: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


class HashEncoder:
    """Unit vectors seeded by a hash of the text; whitespace 'tokens'."""

    def __init__(self, dim: int = 16, max_content_tokens: int = 254) -> None:
        self.name = f"hash-{dim}"
        self.dim = dim
        self.max_content_tokens = max_content_tokens
        self.calls = 0

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in _WORD.finditer(text)]

    async def embed_batch(self, texts: list[str], *, background: bool = False) -> EmbeddingBatch:
        self.calls += 1
        vectors = np.stack([hash_vector(t, self.dim) for t in texts]) if texts else None
        n = len(texts)
        return EmbeddingBatch(
            vectors if vectors is not None else np.zeros((0, self.dim), np.float32),
            np.array([len(self.token_spans(t)) for t in texts], dtype=np.int64),
            np.zeros(n, dtype=bool),
        )
