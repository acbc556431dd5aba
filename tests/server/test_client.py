"""``ayo.client.AsyncClient`` against a real server: every method, and every error type raised
from a real server response."""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import pytest

from ayo.client import (
    AsyncClient,
    BadRequest,
    Completion,
    ConnectionFailed,
    ContextWindowExceeded,
    NotFound,
    PayloadTooLarge,
    QueryResponse,
    RateLimited,
    StreamDelta,
    Unauthorized,
)

MESSAGES = [{"role": "user", "content": "Name a primary colour."}]
QUESTION = "What is the capital of France?"


@pytest.fixture
async def client(server_url):
    async with AsyncClient(server_url, timeout=60) as c:
        yield c


async def test_health_models_apps_collections(client, server):
    health = await client.health()
    assert health["status"] == "ok" and "short_rag" in health["apps"]
    assert [m.id for m in await client.models()] == server.state.model_ids
    apps = {a.name: a for a in await client.apps()}
    short = apps["short_rag"]
    assert short.model == "app:short_rag" and short.plan is not None
    assert [(i.name, i.required) for i in short.inputs] == [
        ("question", True),
        ("documents", False),
    ]
    wiki = {c.name: c for c in await client.collections()}["wiki"]
    assert wiki.documents == 24 and wiki.chunks >= 24


async def test_ingest_then_listed(client):
    docs = [
        {"id": "c1", "text": "The okapi is a giraffid of the Congo.", "metadata": {"k": 1}},
        {"id": "c2", "text": "Basalt is a volcanic rock."},
    ]
    first = await client.ingest("client_test", docs)
    assert (first.collection, first.ingested, first.duplicates) == ("client_test", 2, 0)
    assert first.chunks >= 2
    again = await client.ingest("client_test", docs)
    assert (again.ingested, again.duplicates) == (0, 2)
    listed = {c.name: c.documents for c in await client.collections()}
    assert listed["client_test"] == 2


async def test_query_and_stream(client, server):
    result = await client.query("short_rag", {"question": QUESTION}, trace=True)
    assert isinstance(result, QueryResponse) and result.latency_ms > 0
    assert isinstance(result.answer, str) and result.answer
    assert result.trace is not None and len(result.outputs["docs"]) == 3
    items = [item async for item in client.stream("short_rag", {"question": QUESTION})]
    assert isinstance(items[-1], QueryResponse)
    deltas = [i.text for i in items[:-1] if isinstance(i, StreamDelta)]
    assert "".join(deltas) == items[-1].answer == result.answer  # greedy: same answer


async def test_complete_chat_embed(client, server):
    from ayo.engines.llm import SamplingParams

    llm = server.state.llm
    ref = server.call(llm.generate("The sun is", SamplingParams(max_tokens=6)))[0]
    done = await client.complete("The sun is", max_tokens=6)
    assert isinstance(done, Completion) and done.text == ref.text
    assert done.usage.completion_tokens == len(ref.token_ids)
    reply = await client.chat(MESSAGES, max_tokens=8)
    chat_ref = server.call(
        llm.generate(llm.apply_chat_template(MESSAGES), SamplingParams(max_tokens=8))
    )
    assert reply.text == chat_ref[0].text and reply.finish_reason == chat_ref[0].finish_reason
    assert (
        "".join([t async for t in await client.chat(MESSAGES, max_tokens=8, stream=True)])
        == reply.text
    )
    vectors = await client.embed(["red", "a blue sky"])
    ref_vecs = server.call(server.state.embedder.embed(["red", "a blue sky"]))
    np.testing.assert_allclose(np.array(vectors), ref_vecs, atol=1e-6)


async def test_error_types_from_real_responses(client, server):
    with pytest.raises(BadRequest) as e:
        await client.query("short_rag", {"question": QUESTION, "colour": "red"})
    assert e.value.status == 400 and e.value.type == "invalid_request_error"
    assert "colour" in e.value.message
    with pytest.raises(NotFound) as e:
        await client.query("no_such_app", {"question": QUESTION})
    assert e.value.status == 404 and e.value.type == "not_found_error"
    with pytest.raises(NotFound):
        await client.chat(MESSAGES, model="gpt-9")
    with pytest.raises(ContextWindowExceeded) as e:
        await client.complete("hello " * server.state.llm.max_model_len, max_tokens=1)
    assert e.value.status == 422 and e.value.type == "context_length_exceeded"
    with pytest.raises(BadRequest):  # raised before iterating, like the openai SDK
        await client.chat(MESSAGES, stream=True, max_tokens=0)
    big = "x" * (server.state.config.max_body_bytes + 1)
    with pytest.raises(PayloadTooLarge) as e:
        await client.embed([big])
    assert e.value.status == 413


async def test_unauthorized_and_key(keyed_server, api_key):
    async with AsyncClient(keyed_server.url) as anonymous:
        assert (await anonymous.health())["status"] == "ok"  # /health stays open
        with pytest.raises(Unauthorized) as e:
            await anonymous.models()
        assert e.value.status == 401 and e.value.type == "authentication_error"
    async with AsyncClient(keyed_server.url, api_key=api_key) as keyed:
        assert any(m.id == "app:short_rag" for m in await keyed.models())


async def test_connection_failed():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with AsyncClient(f"http://127.0.0.1:{port}", timeout=5) as c:
        with pytest.raises(ConnectionFailed) as e:
            await c.health()
    assert e.value.status == 0 and e.value.type == "connection_error"


async def test_chat_completions_and_app_queries_share_one_admission(server, server_url):
    """MAX_QUERIES chat streams hold every query slot of the App: an app query then waits in
    line (one place, MAX_QUEUED), a completion beyond the line is refused with 429; leaving the
    streams lets the app query run, and frees the slots and the KV blocks."""
    from tests.server.conftest import MAX_QUERIES

    llm, app = server.state.llm, server.state.app
    before = llm.stats().used_blocks
    clients = [AsyncClient(server_url, timeout=60) for _ in range(MAX_QUERIES)]
    streams = []
    try:
        for c in clients:
            s = await c.chat(MESSAGES, max_tokens=1500, ignore_eos=True, stream=True)
            await anext(s)  # the first text arrives: the request holds its slot
            streams.append(s)
        assert app.in_flight == MAX_QUERIES
        async with AsyncClient(server_url, timeout=60) as waiting, AsyncClient(server_url) as extra:
            query = asyncio.ensure_future(waiting.query("short_rag", {"question": "the sea"}))
            for _ in range(100):
                if app.waiting:
                    break
                await asyncio.sleep(0.05)
            assert app.waiting == 1 and not query.done()  # an app query waits for a chat's slot
            with pytest.raises(RateLimited) as e:
                await extra.complete("hi", max_tokens=1)
            assert e.value.status == 429 and e.value.type == "rate_limit_error"
            for s in streams:
                await s.aclose()
            streams = []
            assert (await query).outputs["answer"]
    finally:
        for s in streams:
            await s.aclose()
        for c in clients:
            await c.close()
    for _ in range(200):
        stats = llm.stats()
        if app.in_flight == 0 and stats.used_blocks == before:
            break
        await asyncio.sleep(0.05)
    assert app.in_flight == 0 and app.waiting == 0
    assert stats.running + stats.waiting + stats.idle == 0 and stats.used_blocks == before
