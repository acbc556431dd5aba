"""Chunker with the real tokenizer; DocumentStore round trips and atomic, durable writes."""

from __future__ import annotations

import sqlite3
import threading

import numpy as np
import pytest

from ayo.engines import Chunker, ChunkerConfig, Document, DocumentStore, DuplicateId
from ayo.engines.corpus import load_wiki
from ayo.engines.errors import InvalidRequest, UnknownCollection


def test_chunks_are_token_windows_with_overlap(minilm):
    text = " ".join(a.extract for a in load_wiki(limit=8))
    chunker = Chunker(minilm.token_spans, ChunkerConfig(chunk_tokens=64, overlap=10))
    chunks = chunker.split(text)
    spans = minilm.token_spans(text)
    starts = list(range(0, len(spans) - 10, 54))  # windows of 64 tokens advancing by 54
    want = [text[spans[s][0] : spans[min(s + 64, len(spans)) - 1][1]] for s in starts]
    assert chunks == want and len(chunks) > 5
    # Neighbours share exactly the 10 overlap tokens' text.
    for s, a, b in zip(starts, chunks, chunks[1:]):
        shared = text[spans[s + 54][0] : spans[s + 63][1]]
        assert a.endswith(shared) and b.startswith(shared)
    assert all(len(minilm.token_spans(c)) <= 66 for c in chunks)  # a cut may split a word
    assert chunker.split("short text") == ["short text"]
    with pytest.raises(ValueError, match="overlap"):
        ChunkerConfig(chunk_tokens=64, overlap=40)


def test_a_long_text_is_tokenized_in_sections_with_the_same_spans(minilm, monkeypatch):
    from ayo.engines import chunker as chunker_module

    text = "  ".join(a.extract for a in load_wiki(limit=40))
    chunker = Chunker(minilm.token_spans, ChunkerConfig(chunk_tokens=64, overlap=10))
    whole = chunker.split(text)
    monkeypatch.setattr(chunker_module, "SECTION_CHARS", 997)  # many cuts, some mid-sentence
    assert chunker.spans(text) == minilm.token_spans(text)
    assert chunker.split(text) == whole
    stop = threading.Event()
    stop.set()
    with pytest.raises(InterruptedError):
        chunker.split(text, stop=stop)


def test_store_round_trip_and_rollback(tmp_path):
    store = DocumentStore(tmp_path / "d.sqlite3")
    store.create_collection("c", 4, "enc")
    with pytest.raises(InvalidRequest, match="built with"):
        store.create_collection("c", 8, "other")
    docs = [Document("a", "alpha text", "A", {"k": 1}), Document("b", "beta text")]
    vecs = [np.arange(8, dtype=np.float32).reshape(2, 4), np.ones((1, 4), np.float32)]
    stored = store.add_documents("c", docs, [["alpha", "text"], ["beta text"]], vecs)
    assert [len(s.chunk_ids) for s in stored] == [2, 1]
    _, got = next(store.chunk_vectors("c"))
    np.testing.assert_array_equal(got, np.concatenate(vecs))
    assert store.get_document("c", "a") == docs[0]
    hits = store.hits(np.array([stored[1].chunk_ids[0], -1, 999]), np.array([0.5, 0, 0]))
    assert [(h.doc_key, h.text, h.score) for h in hits] == [("b", "beta text", 0.5)]
    with pytest.raises(DuplicateId):  # the new doc "c" must not be written either
        store.add_documents("c", [Document("c", "x"), Document("a", "y")], [["x"], ["y"]],
                            [np.zeros((1, 4), np.float32)] * 2)  # fmt: skip
    assert store.collection("c").documents == 2 and store.get_document("c", "c") is None
    with pytest.raises(UnknownCollection):
        store.collection("zz")
    assert store.delete_documents("c", ["a"]) == stored[0].chunk_ids
    store.close()
    # Written through SQLite WAL: another connection sees the committed state.
    db = sqlite3.connect(tmp_path / "d.sqlite3")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 1
