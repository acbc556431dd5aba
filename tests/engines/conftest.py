"""Shared fixtures: the real MiniLM embedder is loaded once per test session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def minilm():
    from ayo.engines import Embedder

    embedder = Embedder.from_model("all-minilm-l6-v2")
    yield embedder
    embedder.close()


@pytest.fixture(scope="session")
def st_minilm(minilm):
    sentence_transformers = pytest.importorskip(
        "sentence_transformers", reason="the peer check needs sentence-transformers (test extra)"
    )
    return sentence_transformers.SentenceTransformer(str(minilm.model_path), device="cpu")
