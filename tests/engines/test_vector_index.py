"""VectorIndex against brute-force numpy search; ANN recall; ids, persistence, errors."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from ayo.engines import (
    DimensionMismatch,
    DuplicateId,
    IndexConfig,
    InvalidRequest,
    UnknownCollection,
    VectorIndex,
)

CPU = IndexConfig(device="cpu")


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _brute(keys, ids, queries, k):
    scores = queries @ keys.T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return ids[order], np.take_along_axis(scores, order, axis=1)


def test_exact_matches_brute_force_with_awkward_ids():
    rng = np.random.default_rng(0)
    keys, queries = _unit(rng, 999, 19), _unit(rng, 13, 19)
    ids = rng.choice(10**12, size=999, replace=False).astype(np.int64)
    index = VectorIndex(config=IndexConfig(kind="exact", device="cpu"))
    index.create_collection("c", 19)
    index.add("c", ids[:500], keys[:500])
    index.add("c", ids[500:], keys[500:])
    result = index.search_sync("c", queries, k=7)
    want_ids, want_scores = _brute(keys, ids, queries, 7)
    np.testing.assert_array_equal(result.ids, want_ids)
    np.testing.assert_allclose(result.scores, want_scores, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_ann_recall_against_exact(kind):
    rng = np.random.default_rng(1)
    centers = _unit(rng, 50, 32)  # clustered data, like embeddings
    keys = centers[rng.integers(0, 50, 3000)] + 0.3 * _unit(rng, 3000, 32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    queries = keys[rng.choice(3000, 50, replace=False)] + 0.05 * _unit(rng, 50, 32)
    ids = np.arange(3000, dtype=np.int64)
    index = VectorIndex(config=IndexConfig(kind=kind, device="cpu"))
    index.create_collection("c", 32)
    index.add("c", ids, keys)
    got = index.search_sync("c", queries, k=10).ids
    want, _ = _brute(keys, ids, queries, 10)
    recall = np.mean([len(set(g) & set(w)) / 10 for g, w in zip(got, want)])
    assert recall >= 0.9, f"{kind} recall@10 {recall:.3f}"


@pytest.mark.parametrize("kind", ["exact", "hnsw", "ivf"])
def test_remove_then_search_and_compaction(kind):
    rng = np.random.default_rng(2)
    keys = _unit(rng, 400, 8)
    ids = np.arange(100, 500, dtype=np.int64)
    index = VectorIndex(config=IndexConfig(kind=kind, device="cpu", rebuild_ratio=0.5))
    index.create_collection("c", 8)
    index.add("c", ids, keys)
    gone = ids[::3]
    assert index.remove("c", gone) == len(gone) and index.remove("c", gone) == 0
    hit = index.search_sync("c", keys[:1], k=400).ids[0]  # query = a removed vector
    assert not set(hit[hit >= 0]) & set(gone.tolist())
    assert index.count("c") == 400 - len(gone)
    index.remove("c", ids[1::3])  # past rebuild_ratio: compaction, same answers
    live = np.setdiff1d(ids, np.concatenate([gone, ids[1::3]]))
    np.testing.assert_array_equal(np.sort(index.ids("c")), live)


def test_auto_switches_to_hnsw_and_persists(tmp_path):
    rng = np.random.default_rng(3)
    keys = _unit(rng, 300, 16)
    cfg = IndexConfig(kind="auto", auto_threshold=200, device="cpu")
    index = VectorIndex(tmp_path, cfg)
    index.create_collection("small", 16)
    index.create_collection("big", 16)
    index.add("small", np.arange(100), keys[:100])
    index.add("big", np.arange(300), keys)
    kinds = {c.name: c.kind for c in index.collections()}
    assert kinds == {"small": "exact", "big": "hnsw"}
    before = index.search_sync("big", keys[:5], k=4)
    index.close()
    again = VectorIndex(tmp_path, cfg)
    assert {c.name: (c.kind, c.count) for c in again.collections()} == {
        "small": ("exact", 100), "big": ("hnsw", 300)}  # fmt: skip
    after = again.search_sync("big", keys[:5], k=4)
    np.testing.assert_array_equal(before.ids, after.ids)
    again.drop_collection("big")
    assert not (tmp_path / "big").exists()


async def test_batched_async_search_and_errors():
    rng = np.random.default_rng(4)
    keys = _unit(rng, 50, 8)
    index = VectorIndex(config=IndexConfig(kind="exact", device="cpu"))
    index.create_collection("c", 8)
    index.add("c", np.arange(50), keys)
    results = await asyncio.gather(*(index.search("c", keys[i], k=1 + i % 3) for i in range(20)))
    for i, r in enumerate(results):
        assert r.ids.shape == (1, 1 + i % 3) and r.ids[0, 0] == i
    many = await index.search("c", keys[:20], k=2)  # one request, twenty queries: one round
    assert (many.ids[:, 0] == np.arange(20)).all()
    assert index.stats().batches == 21  # each search as given (the runtime forms batches)
    few = await index.search("c", keys[:2], k=60)  # more than stored: padded with -1
    assert (few.ids[:, 50:] == -1).all() and np.isneginf(few.scores[:, 50:]).all()
    with pytest.raises(DimensionMismatch):
        await index.search("c", np.ones(9, np.float32), k=1)
    with pytest.raises(DimensionMismatch):
        index.add("c", np.array([99]), np.ones((1, 9), np.float32))
    with pytest.raises(DuplicateId):
        index.add("c", np.array([3]), keys[:1])
    with pytest.raises(DuplicateId):
        index.add("c", np.array([77, 77]), keys[:2])
    with pytest.raises(UnknownCollection):
        await index.search("missing", keys[0], k=1)
    with pytest.raises(InvalidRequest):
        await index.search("c", keys[0], k=0)
    with pytest.raises(InvalidRequest):
        index.add("c", np.array([98]), np.full((1, 8), np.nan, np.float32))
    ok = await index.search("c", keys[5], k=1)  # the engine still serves
    assert ok.ids[0, 0] == 5 and index.count("c") == 50
    index.close()


def test_gpu_similarity_backend_matches_faiss():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA: the torch-cuda backend runs ayo.kernels.similarity_topk on GPU")
    rng = np.random.default_rng(5)
    keys, queries = _unit(rng, 777, 24), _unit(rng, 9, 24)
    gpu = VectorIndex(config=IndexConfig(kind="exact"))
    assert gpu.backend in ("torch-cuda", "faiss-gpu")
    gpu.create_collection("c", 24)
    gpu.add("c", np.arange(777), keys)
    gpu.remove("c", np.array([0, 1]))
    got = gpu.search_sync("c", queries, k=5)
    want_ids, want_scores = _brute(keys[2:], np.arange(2, 777), queries, 5)
    np.testing.assert_array_equal(got.ids, want_ids)
    np.testing.assert_allclose(got.scores, want_scores, rtol=1e-4, atol=1e-4)
