"""Every error case of the server, with raw aiohttp: status, type, a message naming the problem,
the JSON shape, never a traceback."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.server.conftest import MAX_QUERIES, MAX_QUEUED
from tests.server.helpers import error_of, sse_events, wait_until

Q = "/v1/apps/short_rag/query"


async def _post(url: str, path: str, **kw) -> tuple[int, dict]:
    if "data" in kw:
        kw["headers"] = {"content-type": "application/json", **kw.get("headers", {})}
    async with aiohttp.ClientSession() as s, s.post(url + path, **kw) as r:
        return r.status, await error_of(r)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"{not json", "malformed JSON"),
        (b"[1, 2]", "must be an object"),
        (b"", "needs a JSON body"),
        (b'{"inputs": "what?"}', "'inputs' must be an object"),
        (b'{"inputs": {"question": 7}}', "'question' must be a non-blank string"),
        (b'{"inputs": {"question": "  "}}', "'question' must be a non-blank string"),
        (b'{"inputs": {"question": "q", "colour": "red"}}', "has no inputs ['colour']"),
        (b'{"inputs": {}}', "needs inputs ['question']"),
        (b'{"inputs": {"question": "q"}, "stream": "yes"}', "'stream' must be a boolean"),
        (b'{"inputs": {"question": "q"}, "deadline": -1}', "'deadline' must be >= 0.001"),
        (b'{"inputs": {"question": "q"}, "optimise": true}', "unknown field(s) ['optimise']"),
        (b'{"inputs": {"question": "q", "documents": [1]}}', "array of non-blank strings"),
        (b'{"inputs": {"question": "q", "documents": []}}', "non-empty array"),
    ],
)
async def test_bad_query_bodies_are_400(server_url: str, body: bytes, needle: str) -> None:
    status, error = await _post(server_url, Q, data=body)
    assert status == 400 and error["type"] == "invalid_request_error"
    assert needle in error["message"], error


async def test_bad_ingest_bodies_are_400(server_url: str) -> None:
    path = "/v1/collections/c1/documents"
    for body, needle in [
        ({"documents": []}, "is empty"),
        ({"documents": [{"id": "a"}]}, "documents[0].text"),
        ({"documents": [{"text": "x"}]}, "documents[0].id"),
        ({"documents": [{"id": "a", "text": "x", "tags": []}]}, "unknown field(s) ['tags']"),
        ({"docs": []}, "unknown field(s) ['docs']"),
    ]:
        status, error = await _post(server_url, path, json=body)
        assert status == 400 and needle in error["message"], (body, error)
    status, error = await _post(server_url, "/v1/collections/bad name!/documents",
                                json={"documents": [{"id": "a", "text": "x"}]})  # fmt: skip
    assert status == 400 and "bad name!" in error["message"]


async def test_unknown_things_are_404(server_url: str) -> None:
    status, error = await _post(server_url, "/v1/apps/nope/query", json={"inputs": {}})
    assert status == 404 and error["type"] == "not_found_error" and "'nope'" in error["message"]
    async with aiohttp.ClientSession() as s:
        for path in ("/v1/apps/nope/plan.svg", "/v1/collections/nope", "/v1/nothing"):
            async with s.get(server_url + path) as r:
                assert r.status == 404, path
                assert (await error_of(r))["type"] == "not_found_error"
        async with s.delete(server_url + "/v1/apps") as r:
            assert r.status == 405 and "method not allowed" in (await error_of(r))["message"]


async def test_body_over_the_limit_is_413(server: object) -> None:
    limit = server.state.config.max_body_bytes
    body = b'{"inputs": {"question": "' + b"a" * limit + b'"}}'
    status, error = await _post(server.url, Q, data=body)
    assert status == 413 and error["type"] == "request_too_large"
    assert str(limit) in error["message"]


async def test_prompt_over_the_context_window_is_422(server: object) -> None:
    window = server.state.llm.max_model_len
    question = "word " * (window + 100)
    status, error = await _post(server.url, Q, json={"inputs": {"question": question}})
    assert status == 422 and error["type"] == "context_length_exceeded"
    assert str(window) in error["message"], error


async def test_api_key_is_required_when_set(keyed_server: object) -> None:
    url, body = keyed_server.url, {"inputs": {"question": 1}}
    async with aiohttp.ClientSession() as s:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
            async with s.post(url + Q, json=body, headers=headers) as r:
                assert r.status == 401 and r.headers["WWW-Authenticate"] == "Bearer"
                assert (await error_of(r))["type"] == "authentication_error"
        async with s.get(url + "/v1/collections") as r:
            assert r.status == 401
        async with s.get(url + "/health") as r:  # liveness stays open
            assert r.status == 200
        async with s.post(url + Q, json=body, headers=keyed_server.headers) as r:
            assert r.status == 400  # past auth: now the body is checked


async def test_full_server_queues_then_is_429_and_frees_its_slots(server: object) -> None:
    """MAX_QUERIES streams in flight: the next query waits in line (MAX_QUEUED places), one
    beyond the line gets 429 at once; once the streams are dropped the waiting query runs, and
    the slots and KV blocks come back (the next tests' queries run)."""
    body = {"inputs": {"question": "the sea"}, "stream": True}
    url = server.url + "/v1/apps/long_answer/query"
    async with aiohttp.ClientSession() as s:
        held = [await s.post(url, json=body) for _ in range(MAX_QUERIES)]
        for r in held:
            assert r.status == 200
            assert (await anext(sse_events(r)))[0] == "delta"

        async def query() -> tuple[int, dict]:
            async with s.post(server.url + Q, json={"inputs": {"question": "q"}}) as r:
                return r.status, await r.json()

        waiting = asyncio.ensure_future(query())
        assert await wait_until(lambda: server.state.app.waiting == MAX_QUEUED)
        status, error = await _post(server.url, Q, json={"inputs": {"question": "q"}})
        assert status == 429 and error["type"] == "rate_limit_error"
        assert f"{MAX_QUERIES} queries are in flight and {MAX_QUEUED} waiting" in error["message"]
        assert not waiting.done()
        for r in held:
            r.close()
        status, answer = await waiting
        assert status == 200 and answer["outputs"]["answer"]
    llm = server.state.llm
    assert await wait_until(lambda: server.state.app.in_flight == 0)
    assert await wait_until(lambda: llm.stats().running == 0 and llm.stats().used_blocks == 0)


async def test_unexpected_exception_is_a_generic_500(caplog: pytest.LogCaptureFixture) -> None:
    """A handler bug: logged with its traceback, answered without it."""
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from ayo.server.errors import error_middleware

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("secret internal detail")

    app = web.Application(middlewares=[error_middleware])
    app.router.add_get("/broken", broken)
    async with TestClient(TestServer(app)) as client:
        r = await client.get("/broken")
        assert r.status == 500
        error = await error_of(r)
    assert error["type"] == "server_error" and "secret" not in error["message"]
    assert "secret internal detail" in caplog.text  # the operator sees it
