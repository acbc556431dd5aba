"""KeywordIndex against bm25s used directly; add/remove; batching; errors."""

from __future__ import annotations

import asyncio

import bm25s
import numpy as np
import pytest

from ayo.engines import DuplicateId, InvalidRequest, KeywordIndex, UnknownCollection

TEXTS = [
    "The cat sat on the mat near the door",
    "Dogs are loyal pets and good companions",
    "A cat and a dog can live together",
    "Quantum mechanics describes subatomic particles",
    "The stock market fell sharply on Monday",
    "Cats purr when they are content",
]


def test_scores_equal_bm25s_directly():
    index = KeywordIndex()
    index.create_collection("c")
    ids = np.array([10, 20, 30, 40, 50, 60])
    index.add("c", ids, TEXTS)
    got = index.search_sync("c", "cat dog pets", k=4)
    ref = bm25s.BM25()
    ref.index(bm25s.tokenize(TEXTS, stopwords="en", return_ids=False, show_progress=False),
              show_progress=False)  # fmt: skip
    docs, scores = ref.retrieve(
        bm25s.tokenize(["cat dog pets"], stopwords="en", return_ids=False, show_progress=False),
        k=4, show_progress=False,
    )  # fmt: skip
    keep = scores[0] > 0
    np.testing.assert_array_equal(got.ids, ids[docs[0][keep]])
    np.testing.assert_allclose(got.scores, scores[0][keep], rtol=1e-6)


async def test_add_remove_batch_and_errors():
    index = KeywordIndex()
    index.create_collection("c")
    index.add("c", [1, 2, 3], TEXTS[:3])
    first = await index.search("c", "quantum particles", k=3)
    assert len(first.ids) == 0  # no shared term: no hits, not random ones
    index.add("c", [4], [TEXTS[3]])  # rebuilt lazily on the next search
    results = await asyncio.gather(
        index.search("c", "quantum particles", k=3), index.search("c", "cat", k=1)
    )
    assert list(results[0].ids) == [4] and len(results[1].ids) == 1
    assert index.remove("c", [4]) == 1
    assert len((await index.search("c", "quantum", k=3)).ids) == 0
    with pytest.raises(DuplicateId):
        index.add("c", [1], ["again"])
    with pytest.raises(UnknownCollection):
        await index.search("nope", "cat", k=1)
    with pytest.raises(InvalidRequest):
        await index.search("c", "  ", k=1)
    assert (await index.search("c", "the", k=2)).ids.size == 0  # stopwords only
    index.close()
