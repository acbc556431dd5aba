"""Retrieval quality on a slice of the wiki corpus with the real embedder (fast version of
``python -m benchmarks.retrieval``): description as query, the article's title as target."""

from __future__ import annotations

import numpy as np

from ayo.engines import IndexConfig, RetrievalStore, VectorIndex
from ayo.engines.corpus import load_wiki


async def test_recall_at_10_on_a_wiki_slice(tmp_path, minilm):
    articles = [a for a in load_wiki()[::40] if a.description]  # ~250 spread over the corpus
    store = RetrievalStore(tmp_path, minilm)
    store.create_collection("wiki")
    ack = await store.ingest("wiki", [a.to_document() for a in articles])
    assert ack.documents == len(articles) >= 240
    queries = [a.description for a in articles]
    hits = await store.search("wiki", queries, k=10)
    found = [a.title in {h.doc_key for h in hs} for a, hs in zip(articles, hits)]
    recall = float(np.mean(found))
    assert recall >= 0.75, f"recall@10 {recall:.3f} over {len(found)} queries"

    # HNSW over the same vectors agrees with exact search.
    ids, vectors = next(iter(store.store.chunk_vectors("wiki", page=100_000)))
    hnsw = VectorIndex(config=IndexConfig(kind="hnsw", device="cpu"))
    hnsw.create_collection("w", vectors.shape[1])
    hnsw.add("w", ids, vectors)
    qv = minilm.embed_sync(queries).vectors
    exact = store.vectors.search_sync("wiki", qv, 10).ids
    approx = hnsw.search_sync("w", qv, 10).ids
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact, approx)])
    assert overlap >= 0.95, f"HNSW recall@10 vs exact {overlap:.3f}"

    kw = await store.keyword_search("wiki", [articles[0].title], k=3)
    assert kw[0][0].doc_key == articles[0].title
    store.close()
