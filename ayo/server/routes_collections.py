"""``POST /v1/collections/{name}/documents`` (ingest) and ``GET /v1/collections``."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from ayo.scheduler import DeadlineExceeded
from ayo.scheduler.batching.engine_scheduler import QueueFull
from ayo.server.errors import (
    ApiError,
    bad_request,
    field,
    number_in,
    read_json,
    reject_unknown,
)
from ayo.server.mapping import to_api_error
from ayo.server.state import STATE

log = logging.getLogger(__name__)

MAX_DOCUMENTS = 10_000
_DOC_FIELDS = frozenset({"id", "text", "title", "metadata"})


def _documents(body: dict[str, Any], max_document_mb: float) -> list[Any]:
    from ayo.engines import Document

    reject_unknown(body, {"documents", "on_duplicate"}, "the ingest body")
    rows = field(body, "documents", list, required=True)
    if not rows:
        raise bad_request("field 'documents' is empty: give at least one document")
    if len(rows) > MAX_DOCUMENTS:
        raise bad_request(f"at most {MAX_DOCUMENTS} documents per request, got {len(rows)}")
    docs = []
    for i, row in enumerate(rows):
        where = f"documents[{i}]"
        if not isinstance(row, dict):
            raise bad_request(f"{where} must be an object with 'id' and 'text'")
        reject_unknown(row, _DOC_FIELDS, where)
        doc_id = row.get("id")
        if not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool) or doc_id == "":
            raise bad_request(f"{where}.id must be a non-empty string (or an integer)")
        text = row.get("text")
        if not isinstance(text, str) or not text.strip():
            raise bad_request(f"{where}.text must be a non-empty string")
        if len(text) > max_document_mb * 2**20:
            raise ApiError(
                413,
                "request_too_large",
                f"{where}.text has {len(text) / 2**20:.1f} Mi characters; a document may have "
                f"at most {max_document_mb:g} Mi (the server sets it: --max-document-mb)",
            )
        title = row.get("title")
        metadata = row.get("metadata")
        if title is not None and not isinstance(title, str):
            raise bad_request(f"{where}.title must be a string")
        if metadata is not None and not isinstance(metadata, dict):
            raise bad_request(f"{where}.metadata must be an object")
        title, metadata = title or "", metadata or {}
        docs.append(Document(id=str(doc_id), text=text, title=title, metadata=metadata))
    return docs


async def _ingest(state: Any, name: str, docs: list[Any], on_duplicate: str) -> Any:
    async with state.ingest_lock:
        return await state.store.ingest(name, docs, on_duplicate)


async def ingest(request: web.Request) -> web.Response:
    """Chunk, embed and store documents in collection ``name`` (created when new). Returns
    ``{"collection", "ingested", "duplicates", "chunks"}``; duplicates (ids already stored) are
    skipped, or refused with 400 when ``on_duplicate`` is ``"error"``."""
    from ayo.engines import DuplicateId, InvalidRequest
    from ayo.engines.vector_index import check_collection_name

    state = request.app[STATE]
    name = request.match_info["name"]
    body = await read_json(request)
    docs = _documents(body, state.config.max_document_mb)
    on_duplicate = field(body, "on_duplicate", str, "skip")
    if on_duplicate not in ("skip", "error"):
        raise bad_request("field 'on_duplicate' must be 'skip' or 'error'")
    try:
        check_collection_name(name)
        if name not in {c.name for c in state.store.collections()}:
            state.store.create_collection(name)
        # Shielded: a client that goes away does not leave an ingest half-indexed. Shutdown
        # cancels it (before its commit nothing is stored; after it, the index catches up
        # from the store at the next start).
        task = asyncio.ensure_future(_ingest(state, name, docs, on_duplicate))
        state.ingests.add(task)
        task.add_done_callback(state.ingests.discard)
        ack = await asyncio.shield(task)
    except DuplicateId as exc:  # on_duplicate "error": an id stored already or repeated
        raise ApiError(409, "conflict_error", str(exc)) from None
    except InvalidRequest as exc:
        raise bad_request(str(exc)) from None
    except ValueError as exc:  # an invalid collection name
        raise bad_request(str(exc)) from None
    log.info("ingested %d documents (%d chunks) into %r", ack.documents, ack.chunks, name)
    return web.json_response(
        {
            "collection": name,
            "ingested": ack.documents,
            "duplicates": len(ack.skipped),
            "chunks": ack.chunks,
            "truncated_chunks": ack.truncated_chunks,
        }
    )


def _collection_json(c: Any) -> dict[str, Any]:
    """A ``RetrievalStore`` collection summary as the API shows it."""
    return {
        "name": c.name,
        "documents": c.documents,
        "chunks": c.chunks,
        "vectors": c.vectors,
        "dim": c.dim,
        "embedder": c.embedder,
    }


async def list_collections(request: web.Request) -> web.Response:
    """``{"collections": [{"name", "documents", "chunks", "vectors", "dim", "embedder"}]}``."""
    store = request.app[STATE].store
    rows = await asyncio.to_thread(store.collections)
    return web.json_response({"collections": [_collection_json(c) for c in rows]})


async def get_collection(request: web.Request) -> web.Response:
    store = request.app[STATE].store
    name = request.match_info["name"]
    for c in await asyncio.to_thread(store.collections):
        if c.name == name:
            return web.json_response(_collection_json(c))
    raise ApiError(404, "not_found_error", f"unknown collection {name!r}")


async def list_documents(request: web.Request) -> web.Response:
    """``GET /v1/collections/{name}/documents?limit=100&after=CURSOR``: the stored documents
    (``id``, ``title``, ``metadata``, ``chars``, ``chunks``) in the order they were stored, and
    ``next``, the cursor of the following page (null on the last)."""
    from ayo.engines import UnknownCollection

    store = request.app[STATE].store
    name = request.match_info["name"]
    limit = _int_param(request, "limit", 100, 1, 1000)
    after = _int_param(request, "after", 0, 0, 2**63 - 1)
    try:
        rows = await asyncio.to_thread(store.list_documents, name, after, limit + 1)
    except UnknownCollection:
        raise ApiError(404, "not_found_error", f"unknown collection {name!r}") from None
    more = len(rows) > limit
    rows = rows[:limit]
    return web.json_response(
        {
            "documents": [
                {
                    "id": r.key,
                    "title": r.title,
                    "metadata": r.metadata,
                    "chars": r.chars,
                    "chunks": r.chunks,
                }
                for r in rows
            ],
            "next": str(rows[-1].row) if more else None,
        }
    )


def _int_param(request: web.Request, name: str, default: int, low: int, high: int | None) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f"query parameter {name!r} must be an integer, got {raw!r}") from None
    number_in(value, name, low, high)
    return value


async def search(request: web.Request) -> web.Response:
    """Dense search of collection ``name``: body ``{"query": str | [str], "k": 5}`` ->
    ``{"results": [[{"id", "document", "title", "text", "metadata", "score"}...] per query]}``
    (404 for an unknown collection)."""
    from ayo.engines import InvalidRequest

    state = request.app[STATE]
    name = request.match_info["name"]
    body = await read_json(request)
    reject_unknown(body, {"query", "k"}, "the search body")
    query = field(body, "query", (str, list), required=True)
    queries = [query] if isinstance(query, str) else query
    if not queries or not all(isinstance(q, str) and q.strip() for q in queries):
        raise bad_request("field 'query' must be a non-empty string or array of strings")
    k = field(body, "k", int, 5)
    number_in(k, "k", 1, 100)
    try:
        async with state.app.slot(state.config.query_timeout_s):
            hits = await state.store.search(name, queries, k)
    except (InvalidRequest, QueueFull, DeadlineExceeded) as exc:
        raise to_api_error(exc) from None
    return web.json_response(
        {
            "results": [
                [
                    {
                        "id": f"{h.doc_key}#{h.chunk_id}",
                        "document": h.doc_key,
                        "title": h.title,
                        "text": h.text,
                        "metadata": h.metadata,
                        "score": round(float(h.score), 6),
                    }
                    for h in per_query
                ]
                for per_query in hits
            ]
        }
    )


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/collections/{name}/search", search)
    app.router.add_post("/v1/collections/{name}/documents", ingest)
    app.router.add_get("/v1/collections/{name}/documents", list_documents)
    app.router.add_get("/v1/collections", list_collections)
    app.router.add_get("/v1/collections/{name}", get_collection)
