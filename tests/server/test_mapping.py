"""The App's admission limit (``max_queries``, ``wait``) on the fake engines, and how runtime and
engine exceptions map to HTTP errors."""

from __future__ import annotations

import asyncio

import pytest

from ayo.engines.errors import EngineClosed, InvalidRequest, UnknownCollection
from ayo.engines.llm.errors import ContextLengthExceeded
from ayo.runtime.app import App
from ayo.scheduler import DeadlineExceeded, ExecutionError, PlanError
from ayo.scheduler.batching.engine_scheduler import QueueFull
from ayo.server.errors import ApiError
from ayo.server.mapping import to_api_error


async def test_max_queries_refuses_or_waits() -> None:
    async with App.fake(delay_s=0.05, max_queries=1) as app:
        first = asyncio.ensure_future(app.run("naive_rag", {"question": "bread"}))
        await asyncio.sleep(0.01)
        assert app.in_flight == 1
        with pytest.raises(QueueFull, match="1 queries are in flight"):
            await app.run("naive_rag", {"question": "glass"}, wait=False)
        with pytest.raises(QueueFull):
            await anext(app.stream("naive_rag", {"question": "glass"}, wait=False))
        waited = await app.run("naive_rag", {"question": "glass"})  # waits for the slot
        assert first.done() and waited.outputs["answer"]
        assert (await first).outputs["answer"] and app.in_flight == 0
    with pytest.raises(ValueError, match="max_queries must be >= 1"):
        App(max_queries=0)


async def test_a_bounded_line_waits_under_the_deadline_then_refuses() -> None:
    """Past ``max_queries``, up to ``max_waiting`` queries wait for a slot in arrival order;
    one more is refused at once; a waiting query whose deadline passes fails with
    DeadlineExceeded and leaves the line."""
    async with App.fake(delay_s=0.05, max_queries=1, max_waiting=1) as app:
        first = asyncio.ensure_future(app.run("naive_rag", {"question": "bread"}))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(app.run("naive_rag", {"question": "glass"}))
        await asyncio.sleep(0.01)
        assert (app.in_flight, app.waiting) == (1, 1)
        with pytest.raises(QueueFull, match="1 queries are in flight and 1 waiting"):
            await app.run("naive_rag", {"question": "stars"})
        assert (await second).outputs["answer"] and first.done()
        blocker = asyncio.ensure_future(app.run("naive_rag", {"question": "bread"}))
        await asyncio.sleep(0.01)
        with pytest.raises(DeadlineExceeded, match="waiting for a slot"):
            await app.run("naive_rag", {"question": "late"}, deadline=0.02)
        assert app.waiting == 0
        await blocker
        async with app.slot():  # a collection search holds a slot as a query does
            assert app.in_flight == 1
            with pytest.raises(QueueFull):
                async with app.slot(wait=False):
                    pass
        assert app.in_flight == 0


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    [
        (PlanError("bad inputs", node="input"), 400, "invalid_request_error"),
        (QueueFull("engine 'llm' queue is full"), 429, "rate_limit_error"),
        (ExecutionError("n", "Prefill", QueueFull("full")), 429, "rate_limit_error"),
        (ExecutionError("n", "Prefill", ContextLengthExceeded("9000 > 8192")), 422,
         "context_length_exceeded"),
        (ExecutionError("n", "Search", UnknownCollection("unknown collection 'x'")), 404,
         "not_found_error"),
        (InvalidRequest("k must be >= 1"), 400, "invalid_request_error"),
        (DeadlineExceeded("q1", 50.0, ["llm.decode"]), 504, "timeout"),
        (ExecutionError("n", "Decode", EngineClosed("stopped")), 503, "unavailable"),
        (ExecutionError("n", "Decode", RuntimeError("boom")), 500, "server_error"),
        (ApiError(413, None, "too big"), 413, "request_too_large"),
    ],
)  # fmt: skip
def test_exceptions_map_to_statuses(exc: BaseException, status: int, kind: str) -> None:
    error = to_api_error(exc)
    assert (error.status, error.type) == (status, kind)
    assert error.message


def test_unexpected_exception_message_is_generic() -> None:
    error = to_api_error(KeyError("secret/path/inside"))
    assert error.status == 500 and "secret" not in error.message
