"""RetrievalStore: ingest -> durable store -> indexes; catch-up on reopen; errors."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from ayo.engines import Document, DuplicateId, InvalidRequest, RetrievalStore, UnknownCollection
from ayo.engines.retrieval import RetrievalConfig

from .fakes import HashEncoder, hash_vector


def _docs(n: int, start: int = 0) -> list[Document]:
    return [
        Document(
            id=f"doc-{i}",
            title=f"Title {i}",
            text=f"body of document number {i} " * 3,
            metadata={"i": i},
        )
        for i in range(start, start + n)
    ]


async def test_ingest_search_and_reopen(tmp_path):
    enc = HashEncoder()
    store = RetrievalStore(tmp_path, enc)
    store.create_collection("c1")
    ack = await store.ingest("c1", _docs(20))
    assert (ack.documents, ack.chunks, ack.truncated_chunks) == (20, 20, 0)
    # The exact vector of a chunk's embedded input finds that chunk first, score 1.
    query = hash_vector("Title 7\n" + _docs(8)[7].text.strip(), enc.dim)
    hits = (await store.search_vectors("c1", query[None], k=3))[0]
    assert hits[0].doc_key == "doc-7" and hits[0].metadata == {"i": 7}
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    kw = (await store.keyword_search("c1", ["Title 12"], k=5))[0]
    assert kw and all("12" in h.title for h in kw[:1])
    [summary] = store.collections()
    assert (summary.documents, summary.chunks, summary.vectors, summary.dim) == (20, 20, 20, 16)
    store.close()

    # Reopen: nothing re-embedded, same answers.
    enc2 = HashEncoder()
    again = RetrievalStore(tmp_path, enc2)
    hits2 = (await again.search_vectors("c1", query[None], k=3))[0]
    assert [h.chunk_id for h in hits2] == [h.chunk_id for h in hits] and enc2.calls == 0
    again.close()


async def test_catch_up_when_index_files_are_lost(tmp_path):
    store = RetrievalStore(tmp_path, HashEncoder())
    store.create_collection("c")
    await store.ingest("c", _docs(10))
    store.store.close()  # simulate a crash: the vector index is never saved
    shutil.rmtree(tmp_path / "vectors", ignore_errors=True)
    again = RetrievalStore(tmp_path, HashEncoder())
    ids = again.vectors.ids("c")
    assert sorted(ids) == sorted(again.store.chunk_ids("c")) and len(ids) == 10
    stored = np.concatenate([v for _, v in again.store.chunk_vectors("c")])
    np.testing.assert_array_equal(again.vectors.get("c", again.store.chunk_ids("c")), stored)
    again.close()


async def test_duplicates_unknown_and_delete(tmp_path):
    store = RetrievalStore(tmp_path, HashEncoder())
    store.create_collection("c")
    await store.ingest("c", _docs(5))
    with pytest.raises(DuplicateId):
        await store.ingest("c", _docs(2, start=4))  # doc-4 exists
    with pytest.raises(DuplicateId):
        await store.ingest("c", [*_docs(1, 50), *_docs(1, 50)])
    assert store.collections()[0].documents == 5  # nothing written by the failed calls
    ack = await store.ingest("c", _docs(3, start=4), on_duplicate="skip")
    assert ack.skipped == ["doc-4"] and ack.documents == 2
    ack = await store.ingest("c", [*_docs(1, 60), *_docs(1, 60)], on_duplicate="skip")
    assert ack.skipped == ["doc-60"] and ack.documents == 1  # the first of a repeated id
    with pytest.raises(UnknownCollection):
        await store.ingest("nope", _docs(1))
    with pytest.raises(UnknownCollection):
        await store.search_vectors("nope", np.zeros((1, 16), np.float32))
    with pytest.raises(InvalidRequest):
        Document(id="x", text="   ")
    with pytest.raises(InvalidRequest):
        store.create_collection("bad/name")
    removed = await store.delete("c", ["doc-0", "doc-1"])
    assert removed == 2 and store.vectors.count("c") == 6
    store.close()


async def test_long_documents_are_chunked_with_overlap(tmp_path):
    enc = HashEncoder()
    cfg = RetrievalConfig(embed_title=False)
    store = RetrievalStore(tmp_path, enc, cfg)
    store.create_collection("c")
    words = " ".join(f"w{i}" for i in range(600))
    ack = await store.ingest("c", [Document(id="long", text=words)])
    # 600 tokens, windows of 254 (the encoder's limit) with 30 overlap: starts 0, 224, 448.
    assert ack.chunks == 3
    _, texts = store.store.chunk_texts("c")
    assert texts[1].split()[0] == "w224" and texts[0].split()[-1] == "w253"
    store.close()
