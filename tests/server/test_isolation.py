"""Input that must not harm anyone: text that is not Unicode, bodies that are not JSON, requests
whose size would cost the event loop, documents over the size limit; and the document listing."""

from __future__ import annotations

import time

import aiohttp
import pytest

from tests.server.helpers import error_of

JSON = {"content-type": "application/json"}
SURROGATE = '"lone \\ud800 surrogate"'  # valid JSON, not valid Unicode


@pytest.mark.parametrize(
    ("path", "body", "where"),
    [
        ("/v1/apps/short_rag/query", '{"inputs": {"question": %s}}', "inputs.question"),
        ("/v1/embeddings", '{"model": "all-minilm-l6-v2", "input": [%s]}', "input[0]"),
        ("/v1/collections/c2/documents", '{"documents": [{"id": "a", "text": %s}]}',
         "documents[0].text"),
        ("/v1/chat/completions",
         '{"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": %s}]}',
         "messages[0].content"),
        ("/v1/completions", '{"model": "smollm2-135m-instruct", "prompt": %s}', "prompt"),
        ("/v1/collections/wiki/search", '{"query": %s}', "query"),
    ],
)  # fmt: skip
async def test_a_lone_surrogate_is_400_naming_the_field_everywhere(
    server_url: str, path: str, body: str, where: str
) -> None:
    async with (
        aiohttp.ClientSession() as s,
        s.post(server_url + path, data=body % SURROGATE, headers=JSON) as r,
    ):
        error = await error_of(r)
        assert r.status == 400, error
        assert f"field '{where}' holds a lone surrogate" in error["message"], error


async def test_bodies_that_are_not_json_are_415_and_405_says_allow(server_url: str) -> None:
    body = '{"inputs": {"question": "q"}}'
    async with aiohttp.ClientSession() as s:
        headers = {"content-type": "text/plain"}
        async with s.post(server_url + "/v1/apps/short_rag/query", data=body, headers=headers) as r:
            error = await error_of(r)
            assert r.status == 415 and "application/json" in error["message"], error
        async with s.put(server_url + "/v1/completions", json={}) as r:
            assert r.status == 405 and r.headers["Allow"] == "POST"


async def test_text_longer_than_any_context_is_refused_at_once(server_url: str) -> None:
    """~700k characters (under the test server's 1 MiB body limit) cannot fit 8,192 tokens
    whatever they tokenize to: refused without tokenizing them, and without embedding them."""
    question = "word " * 140_000
    async with aiohttp.ClientSession() as s:
        for path, body in [
            ("/v1/apps/short_rag/query", {"inputs": {"question": question}}),
            ("/v1/completions", {"model": "smollm2-135m-instruct", "prompt": question}),
            ("/v1/chat/completions", {"model": "smollm2-135m-instruct",
                                      "messages": [{"role": "user", "content": question}]}),
        ]:  # fmt: skip
            start = time.perf_counter()
            async with s.post(server_url + path, json=body) as r:
                error = await error_of(r)
            took = time.perf_counter() - start
            assert r.status == 422 and error["type"] == "context_length_exceeded", error
            assert "characters" in error["message"]
            assert took < 10, (path, took)  # tokenizing it alone takes ~1 s; embedding it far more


async def test_a_document_over_the_size_limit_is_413(server_url: str) -> None:
    text = "x" * (600 * 1024)  # over the test server's 0.5 Mi characters
    body = {"documents": [{"id": "small", "text": "fine"}, {"id": "big", "text": text}]}
    async with (
        aiohttp.ClientSession() as s,
        s.post(server_url + "/v1/collections/c3/documents", json=body) as r,
    ):
        error = await error_of(r)
        assert r.status == 413 and "documents[1].text" in error["message"], error
        assert "--max-document-mb" in error["message"]


async def test_documents_are_listed_a_page_at_a_time(server_url: str) -> None:
    url = server_url + "/v1/collections/listing/documents"
    docs = [{"id": f"d{i}", "text": f"document number {i}", "metadata": {"i": i}} for i in range(5)]
    async with aiohttp.ClientSession() as s:
        async with s.post(url, json={"documents": docs}) as r:
            assert (await r.json())["ingested"] == 5
        seen, after = [], None
        while True:
            params = {"limit": "2", **({"after": after} if after else {})}
            async with s.get(url, params=params) as r:
                page = await r.json()
            assert len(page["documents"]) <= 2
            seen += page["documents"]
            after = page["next"]
            if after is None:
                break
        assert [d["id"] for d in seen] == [f"d{i}" for i in range(5)]
        assert seen[3] == {"id": "d3", "title": "", "metadata": {"i": 3}, "chars": 17, "chunks": 1}
        for params, status in [({"limit": "0"}, 400), ({"after": "x"}, 400)]:
            async with s.get(url, params=params) as r:
                assert r.status == status, await r.text()
        async with s.get(server_url + "/v1/collections/nope/documents") as r:
            assert r.status == 404
