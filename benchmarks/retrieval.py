"""Retrieval engines benchmark: embedder vs sentence-transformers, full wiki ingestion,
recall@10 and search latency per index type.

    python -m benchmarks.retrieval              # full corpus (10,033 docs), several minutes
    python -m benchmarks.retrieval --limit 500  # quick check

Recall: each article's ``description`` is the query, its title the target; a hit is the target
among the 10 best chunks. Exact = faiss flat inner product (the default index below 50k vectors).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import statistics
import tempfile
import time

import numpy as np

from ayo.engines import Embedder, IndexConfig, RetrievalStore, VectorIndex
from ayo.engines.corpus import load_wiki
from ayo.runtime.corpus import ingest_all


def machine() -> str:
    import torch

    cpu = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)"


def bench_embedder(embedder: Embedder, texts: list[str]) -> None:
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(embedder.model_path), device="cpu")
    st.encode(texts[:8])
    embedder.embed_sync(texts[:8])
    rows = []
    for name, run in (
        ("ayo Embedder (engine, async)", lambda: asyncio.run(embedder.embed(texts))),
        ("sentence-transformers encode bs=32", lambda: st.encode(texts, batch_size=32)),
    ):
        start = time.perf_counter()
        vectors = run()
        rows.append((name, time.perf_counter() - start, np.asarray(vectors)))
    tokens = sum(len(ids) for ids in embedder.tokenizer(texts, truncation=True,
                                                         max_length=embedder.max_length)["input_ids"])  # fmt: skip
    cos = np.sum(rows[0][2] * rows[1][2], axis=1)
    print(f"\n## Embedder throughput: {len(texts)} wiki passages, {tokens} tokens")
    print(f"| {'engine':36} | passages/s | tokens/s | ratio |")
    print(f"|{'-' * 38}|-----------:|---------:|------:|")
    for name, seconds, _ in rows:
        print(f"| {name:36} | {len(texts) / seconds:10.1f} | {tokens / seconds:8.0f} | "
              f"{rows[1][1] / seconds:5.2f} |")  # fmt: skip
    print(f"max 1 - cosine(ayo, sentence-transformers) = {float(np.max(1 - cos)):.2e}")


def recall_at_10(store: RetrievalStore, ids: np.ndarray, titles: list[str]) -> float:
    keys = {int(h.chunk_id): h.doc_key for h in store.store.hits(ids.ravel(), ids.ravel() * 0.0)}
    found = [t in {keys.get(int(i)) for i in row} for row, t in zip(ids, titles)]
    return float(np.mean(found))


def bench_search(
    store: RetrievalStore, queries: np.ndarray, titles: list[str], texts: list[str]
) -> None:
    ids, vectors = map(np.concatenate, zip(*store.store.chunk_vectors("wiki")))
    indexes = {}
    for kind in ("exact", "hnsw", "ivf"):
        index = VectorIndex(config=IndexConfig(kind=kind, device="cpu"))
        index.create_collection("w", vectors.shape[1])
        start = time.perf_counter()
        index.add("w", ids, vectors)
        index.search_sync("w", queries[:1], 1)  # indexes are built lazily, at the first search
        indexes[kind] = (index, time.perf_counter() - start)
    exact = indexes["exact"][0].search_sync("w", queries, 10).ids
    print(f"\n## Recall@10 over {len(queries)} description queries, {len(ids)} chunks")
    print("| index | build s | recall@10 (title) | overlap with exact@10 |")
    print("|-------|--------:|------------------:|----------------------:|")
    for kind, (index, build) in indexes.items():
        got = index.search_sync("w", queries, 10).ids
        overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, exact)])
        print(f"| {kind:5} | {build:7.2f} | {recall_at_10(store, got, titles):17.3f} | "
              f"{overlap:21.3f} |")  # fmt: skip
    kw = asyncio.run(store.keyword_search("wiki", texts, 10))
    bm25 = np.mean([t in {h.doc_key for h in hs} for hs, t in zip(kw, titles)])
    print(f"| bm25  |       - | {bm25:17.3f} |                     - |")

    print("\n## Search latency (median of repeats), per batch of query vectors, k=10")
    print("| index | batch | ms / batch | us / query |")
    print("|-------|------:|-----------:|-----------:|")
    for kind, (index, _) in indexes.items():
        for batch in (1, 8, 32, 128):
            times = []
            for rep in range(max(5, 256 // batch)):
                q = queries[(rep * batch) % (len(queries) - batch) :][:batch]
                start = time.perf_counter()
                index.search_sync("w", q, 10)
                times.append(time.perf_counter() - start)
            ms = statistics.median(times) * 1e3
            print(f"| {kind:5} | {batch:5} | {ms:10.3f} | {ms * 1e3 / batch:10.1f} |")
    print("\n## The engine path: 128 concurrent single-query `await search` calls, k=10 (each is")
    print("its own round: the engine computes what it is given; the runtime's scheduler merges)")
    print("| index | total ms | us / query | engine rounds |")
    print("|-------|---------:|-----------:|--------------:|")
    for kind, (index, _) in indexes.items():
        before = index.stats().batches

        async def burst(index: VectorIndex = index) -> None:
            await asyncio.gather(*(index.search("w", q, 10) for q in queries[:128]))

        start = time.perf_counter()
        asyncio.run(burst())
        ms = (time.perf_counter() - start) * 1e3
        rounds = index.stats().batches - before
        print(f"| {kind:5} | {ms:8.2f} | {ms * 1e3 / 128:10.1f} | {rounds:13} |")
        index.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="first N wiki articles only")
    parser.add_argument("--embed-passages", type=int, default=512)
    parser.add_argument("--data-dir", default=None, help="keep the store here (a rerun reuses "
                        "it: nothing is re-embedded); default: a temporary folder")  # fmt: skip
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    articles = load_wiki(limit=args.limit)
    print(f"# Retrieval benchmark\nmachine: {machine()}")
    embedder = Embedder.from_model("all-minilm-l6-v2")
    bench_embedder(embedder, [a.extract for a in articles[: args.embed_passages]])

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data_dir or tmp
        store = RetrievalStore(data_dir, embedder)
        summary = asyncio.run(ingest_all(store, "wiki", [a.to_document() for a in articles],
                                         progress=False))  # fmt: skip
        print(f"\n## Ingestion of the wiki corpus (chunk, embed, SQLite commit, index)\n"
              f"{summary.skipped} documents already present; "
              f"{summary.documents} documents, {summary.chunks} chunks "
              f"({summary.truncated_chunks} truncated) in {summary.seconds:.1f} s: "
              f"{summary.docs_per_s:.1f} docs/s, {summary.chunks / summary.seconds:.1f} chunks/s")  # fmt: skip
        store.close()
        start = time.perf_counter()
        store = RetrievalStore(data_dir, embedder)  # reopen: load + catch up, no re-embedding
        print(f"reopen of the data directory: {time.perf_counter() - start:.2f} s")

        targets = [a for a in articles if a.description]
        texts = [a.description for a in targets]
        start = time.perf_counter()
        queries = embedder.embed_sync(texts).vectors
        qs = len(queries) / (time.perf_counter() - start)
        print(f"query embedding: {len(queries)} descriptions at {qs:.0f} queries/s")
        bench_search(store, queries, [a.title for a in targets], texts)
        store.close()
    embedder.close()


if __name__ == "__main__":
    main()
