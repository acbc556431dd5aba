"""The runtime's cheap paths behave like the plain asyncio constructs they replace:
``gather_eager`` like ``gather(..., return_exceptions=True)``, a queued request's future like
``submit`` (cancelling it withdraws the request), a chain of primitives run in one task."""

from __future__ import annotations

import asyncio

import pytest

from ayo.scheduler.batching import PendingRequest
from ayo.scheduler.eager import gather_eager
from ayo.scheduler.engine_scheduler import EngineScheduler


async def _work(delays: list[float], value: int, log: list[str]) -> int:
    try:
        for d in delays:
            await asyncio.sleep(d)
    except asyncio.CancelledError:
        log.append(f"cancelled {value}")
        raise
    if value < 0:
        raise ValueError(value)
    return value


async def test_gather_eager_equals_gather_and_spares_tasks_for_instant_work() -> None:
    def coros(log: list[str]) -> list:
        cases = [([], 1), ([0.0], 2), ([0.002, 0.0], -3), ([0.001], 4), ([], -5)]
        return [_work(d, v, log) for d, v in cases]

    before = len(asyncio.all_tasks())
    got = await gather_eager(coros([]))
    ref = await asyncio.gather(*coros([]), return_exceptions=True)
    assert [repr(x) for x in got] == [repr(x) for x in ref]
    assert len(asyncio.all_tasks()) == before
    # no suspension at all: nothing but this task ever runs
    made: list[asyncio.Task] = []
    loop = asyncio.get_running_loop()
    loop.set_task_factory(lambda lp, c: made.append(asyncio.Task(c, loop=lp)) or made[-1])
    try:
        assert await gather_eager([_work([], v, []) for v in (1, 2, 3)]) == [1, 2, 3]
    finally:
        loop.set_task_factory(None)
    assert made == []


async def test_cancelling_gather_eager_cancels_the_suspended_coroutines() -> None:
    log: list[str] = []
    task = asyncio.ensure_future(
        gather_eager([_work([], 1, log), _work([1.0], 2, log), _work([0.0, 1.0], 3, log)])
    )
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(log) == ["cancelled 2", "cancelled 3"]


async def test_one_cancelled_coroutine_is_reported_not_propagated() -> None:
    async def cancelled_inside() -> None:
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(fut.cancel)
        await fut

    out = await gather_eager([cancelled_inside(), _work([0.0], 7, [])])
    assert isinstance(out[0], asyncio.CancelledError) and out[1] == 7


class _Gate:
    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.seen: list = []

    async def run_batch(self, payloads: list) -> list:
        self.seen.append(list(payloads))
        await self.open.wait()
        return [p * 10 for p in payloads]


async def test_cancelling_an_enqueued_future_withdraws_the_request() -> None:
    gate = _Gate()
    sched = EngineScheduler(gate, "e", max_queue=8)
    sched.start()
    running = sched.enqueue(PendingRequest(1, "a", 1))
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # the engine holds a; b and c queue behind it
    waiting = [sched.enqueue(PendingRequest(q, n, v)) for q, n, v in ((2, "b", 2), (3, "c", 3))]
    assert sched.queue_length == 2
    waiter = asyncio.ensure_future(waiting[0])  # a caller awaiting b, then cancelled
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.sleep(0)
    assert sched.queue_length == 1
    gate.open.set()
    assert await running == 10 and await waiting[1] == 30
    assert gate.seen == [[1], [3]]  # b never reached the engine
    await sched.stop()


async def test_a_chain_of_primitives_runs_in_the_task_that_made_it_ready() -> None:
    from ayo.app import App

    inputs = {"question": "why do stars shine"}
    async with App.fake() as app:
        await app.run("naive_rag", inputs)  # warm
        names: list[str] = []
        loop = asyncio.get_running_loop()

        def factory(lp: asyncio.AbstractEventLoop, coro, **kw) -> asyncio.Task:
            inner = coro.cr_frame.f_locals.get("coro") if coro.__qualname__ == "resume" else None
            names.append(inner.__qualname__ if inner is not None else coro.__qualname__)
            return asyncio.Task(coro, loop=lp, **kw)

        loop.set_task_factory(factory)
        try:
            result = await app.run("naive_rag", inputs)
        finally:
            loop.set_task_factory(None)
        ref = await app.run("naive_rag", inputs, optimize=False)
    # 5 engine primitives and not one task for them: embed -> search -> full prefill ->
    # decode run one after another in the caller's task, and the partial prefill (held for
    # an idle gap) starts and ends without suspending. Tasks are the engines' only.
    assert "GraphRun._run_node" not in names
    assert set(names) <= {"EngineScheduler._run", "FakeLLM.prefill"}, names  # FakeLLM yields once
    # seven primitives and the map listing the answer's sources
    assert len(result.trace.spans) == 8 and result.outputs == ref.outputs


async def test_admission_cancelled_waiter_skipped_by_a_release_keeps_the_count() -> None:
    from ayo.scheduler.admission import Admission

    gate = Admission("llm", 1, "critical_path")
    await gate.acquire(PendingRequest(1, "holder"))
    waiter = asyncio.ensure_future(gate.acquire(PendingRequest(2, "w")))
    await asyncio.sleep(0)
    waiter.cancel()  # its future is cancelled now; its except block runs on its next step
    gate.release()  # skips the cancelled waiter
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert gate.held == 0 and gate.waiting == 0
    await gate.acquire(PendingRequest(3, "next"))
    assert gate.held == 1


def test_serving_gc_settings_apply_and_restore() -> None:
    import gc

    from ayo.scheduler.serving_gc import configure_gc_for_serving, restore_gc

    before = gc.get_threshold()
    try:
        configure_gc_for_serving(young_threshold=20_000)
        assert gc.get_threshold()[0] == 20_000 and gc.get_freeze_count() > 0
    finally:
        restore_gc()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    with pytest.raises(ValueError, match="young_threshold"):
        configure_gc_for_serving(young_threshold=0)
