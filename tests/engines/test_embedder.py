"""Embedder against sentence-transformers' encode (the peer), batching, truncation, errors."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from ayo.engines import Embedder, InvalidRequest, ModelNotFound
from ayo.engines.corpus import load_wiki
from ayo.engines.embedder import pack_by_tokens


@pytest.fixture(scope="module")
def texts() -> list[str]:
    wiki = load_wiki(limit=40)
    long_text = " ".join(a.extract for a in wiki[:6])  # > 256 tokens: truncated
    return [
        *[a.extract for a in wiki[6:16]],
        *[a.description for a in wiki[16:30] if a.description],
        "Ça va? Über naïve café — 東京 🙂",
        "x",
        long_text,
    ]


def test_matches_sentence_transformers(minilm, st_minilm, texts):
    ours = minilm.embed_sync(texts)
    ref = st_minilm.encode(texts, batch_size=8, convert_to_numpy=True)
    assert ours.vectors.dtype == np.float32 and ours.vectors.shape == (len(texts), 384)
    cos = (
        (ours.vectors * ref).sum(1)
        / np.linalg.norm(ref, axis=1)
        / np.linalg.norm(ours.vectors, axis=1)
    )
    assert (1 - cos).max() < 1e-5, f"worst 1 - cosine {(1 - cos).max():.2e}"
    np.testing.assert_allclose(np.linalg.norm(ours.vectors, axis=1), 1.0, atol=1e-5)
    # Truncation is reported, exactly for the text longer than the model limit.
    assert ours.truncated.tolist() == [False] * (len(texts) - 1) + [True]
    assert ours.num_tokens[-1] > minilm.max_length == st_minilm.max_seq_length


async def test_a_batch_of_texts_equals_each_text_alone(minilm, texts):
    """The runtime's scheduler merges texts of many queries into one call: one batch, packed
    in forward passes by token budget, each text's vector as if it were embedded alone."""
    alone = [minilm.embed_sync([t]).vectors[0] for t in texts[:6]]
    before = minilm.stats()
    together = await minilm.embed(texts[:6], info=None)
    for a, b in zip(alone, together):
        np.testing.assert_allclose(a, b, atol=1e-6)  # padding in a shared batch changes nothing
    after = minilm.stats()
    assert after.batches - before.batches == 1
    concurrent = await asyncio.gather(*(minilm.embed([t]) for t in texts[:6]))
    for a, b in zip(alone, concurrent):  # separate calls: separate batches, same vectors
        np.testing.assert_allclose(a, b[0], atol=1e-6)


async def test_bad_text_fails_alone(minilm):
    ok = asyncio.create_task(minilm.embed(["fine"]))
    with pytest.raises(InvalidRequest, match="empty"):
        await minilm.embed(["good", "   "])
    assert (await ok).shape == (1, 384)
    assert (await minilm.embed([])).shape == (0, 384)


def test_pack_by_tokens_respects_budget():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, size=97).tolist()
    groups = pack_by_tokens(lengths, budget=1000)
    assert sorted(i for g in groups for i in g) == list(range(97))
    for g in groups:
        longest = max(lengths[i] for i in g)
        assert lengths[g[0]] == longest and len(g) * longest <= max(1000, longest)


def test_unknown_model_is_a_clear_error(tmp_path):
    with pytest.raises(ModelNotFound, match="offline"):
        Embedder.from_model("no-such-model")
    with pytest.raises(ModelNotFound):
        Embedder.from_model(tmp_path)
