"""App queries over HTTP: JSON, traces, server-sent events, deadlines, a client that leaves."""

from __future__ import annotations

import aiohttp

from tests.server.conftest import SHORT_TOKENS
from tests.server.helpers import error_of, sse_events, wait_until

Q = "/v1/apps/short_rag/query"


async def test_query_returns_outputs_latency_and_a_chrome_trace(server: object) -> None:
    body = {"inputs": {"question": "What is the Alhambra?"}, "trace": True}
    async with aiohttp.ClientSession() as s, s.post(server.url + Q, json=body) as r:
        assert r.status == 200, await r.text()
        result = await r.json()
    assert set(result) == {"outputs", "latency_ms", "trace"}
    answer = result["outputs"]["answer"]
    assert isinstance(answer, str) and answer.strip()
    tokens = server.state.llm.encode(answer)
    assert len(tokens) <= SHORT_TOKENS + 1  # the detokenizer may merge a boundary
    docs = result["outputs"]["docs"]
    assert len(docs) == 3 and docs[0]["id"].startswith("Alhambra#")  # retrieved from wiki
    assert result["latency_ms"] > 0
    events = result["trace"]["traceEvents"]
    rows = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"embedder", "index", "llm"} <= rows
    spans = [e for e in events if e["ph"] == "X"]
    assert any(e["name"].startswith("synthesis") for e in spans)
    assert all(e["dur"] >= 0 for e in spans)


async def test_optimized_and_unoptimized_answers_match(server: object) -> None:
    """Greedy decoding: the module-by-module plan writes the same answer."""
    answers = []
    async with aiohttp.ClientSession() as s:
        for optimize in (True, False):
            body = {"inputs": {"question": "What is Albert Einstein known for?"},
                    "optimize": optimize}  # fmt: skip
            async with s.post(server.url + Q, json=body) as r:
                assert r.status == 200, await r.text()
                result = await r.json()
                assert result["trace"] is None
                answers.append(result["outputs"]["answer"])
    assert answers[0] == answers[1]


async def test_streamed_query_sends_deltas_then_the_result(server: object) -> None:
    body = {"inputs": {"question": "Who was Aristotle?"}, "stream": True}
    async with aiohttp.ClientSession() as s, s.post(server.url + Q, json=body) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "text/event-stream"
        events = [e async for e in sse_events(r)]
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "result" and set(kinds[:-1]) == {"delta"} and len(kinds) >= 2
    result = events[-1][1]
    assert set(result) == {"outputs", "latency_ms", "trace"}
    assert "".join(d["text"] for _, d in events[:-1]) == result["outputs"]["answer"]


async def test_streamed_query_that_fails_at_once_is_a_json_error(server: object) -> None:
    body = {"inputs": {"question": "x " * 9000}, "stream": True}
    async with aiohttp.ClientSession() as s, s.post(server.url + Q, json=body) as r:
        assert r.status == 422
        assert (await error_of(r))["type"] == "context_length_exceeded"


async def test_stream_past_its_deadline_ends_with_an_error_event(server: object) -> None:
    """Deltas are sent, then the deadline passes: the stream ends with ``event: error``."""
    body = {"inputs": {"question": "the sea"}, "stream": True, "deadline": 1.0}
    url = server.url + "/v1/apps/long_answer/query"
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        assert r.status == 200
        events = [e async for e in sse_events(r)]
    assert [k for k, _ in events[:-1]] == ["delta"] * (len(events) - 1) and len(events) >= 2
    kind, data = events[-1]
    assert kind == "error" and data["error"]["type"] == "timeout", data


async def test_deadline_past_is_504_and_frees_the_sequence(server: object) -> None:
    body = {"inputs": {"question": "Describe Aristotle's philosophy."}, "deadline": 0.05}
    async with aiohttp.ClientSession() as s, s.post(server.url + "/v1/apps/naive_rag/query",
                                                     json=body) as r:  # fmt: skip
        assert r.status == 504
        error = await error_of(r)
    assert error["type"] == "timeout" and "deadline" in error["message"]
    llm = server.state.llm
    assert await wait_until(lambda: llm.stats().running == 0 and llm.stats().used_blocks == 0)


async def test_client_leaving_mid_stream_cancels_the_query_and_frees_kv(server: object) -> None:
    llm = server.state.llm
    assert await wait_until(lambda: llm.stats().used_blocks == 0)
    body = {"inputs": {"question": "Describe Aristotle's philosophy at length."}, "stream": True}
    async with aiohttp.ClientSession() as s:
        r = await s.post(server.url + "/v1/apps/naive_rag/query", json=body)
        assert r.status == 200
        kind, _ = await anext(sse_events(r))
        assert kind == "delta"
        stats = llm.stats()
        assert stats.used_blocks > 0 and stats.running + stats.waiting + stats.idle >= 1
        generated = stats.generated_tokens
        r.close()  # the client goes away mid-answer
    assert await wait_until(lambda: llm.stats().used_blocks == 0 and llm.stats().running == 0)
    assert llm.stats().generated_tokens - generated < 60  # stopped well before 64 tokens
    metrics = await _metrics(server.url)
    assert 'ayo_queries_failed_total{app="naive_rag",reason="CancelledError"}' in metrics


async def _metrics(url: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        return await r.text()
