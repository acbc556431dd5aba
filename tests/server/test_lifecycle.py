"""Corpus ingestion at start: an interrupted ingest resumes with only the missing documents."""

from __future__ import annotations

import asyncio
import dataclasses

from ayo.server.lifecycle import ensure_corpus


def _with(server: object, **config: object) -> object:
    """The session's state (same engines and store) with other corpus settings."""
    state = server.state
    return dataclasses.replace(state, config=dataclasses.replace(state.config, **config))


def _stored(server: object, name: str) -> int:
    return {c.name: c.documents for c in server.state.store.collections()}.get(name, 0)


def test_interrupted_ingest_resumes_with_the_missing_documents(server: object) -> None:
    stopped = asyncio.Event()
    stopped.set()  # a SIGTERM that came before the first batch
    state = _with(server, collection="resume", corpus_limit=6)
    assert server.call(ensure_corpus(state, progress=False, stop=stopped)) == 0
    assert _stored(server, "resume") == 0  # the collection exists, empty
    # a first start stopped after 3 documents, then a full one, then a restart
    assert server.call(ensure_corpus(_with(server, collection="resume", corpus_limit=3))) == 3
    assert server.call(ensure_corpus(state, progress=False, batch_size=2)) == 3
    assert _stored(server, "resume") == 6
    assert server.call(ensure_corpus(state, progress=False)) == 0
    assert state.embedded_at_startup == 0


def test_no_corpus_still_creates_the_searched_collection(server: object) -> None:
    state = _with(server, collection="empty_corpus", corpus="none")
    assert server.call(ensure_corpus(state, progress=False)) == 0
    assert "empty_corpus" in {c.name for c in server.state.store.collections()}
