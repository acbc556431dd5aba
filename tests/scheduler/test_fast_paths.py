"""The runtime's cheap paths behave like the plain asyncio constructs they replace: a queued
request's future like ``submit`` (cancelling it withdraws the request), the admission gate's
count, the serving GC settings."""

from __future__ import annotations

import asyncio

import pytest

from ayo.scheduler.batching.engine_scheduler import EngineScheduler
from ayo.scheduler.batching.policies import PendingRequest


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


async def test_admission_cancelled_waiter_skipped_by_a_release_keeps_the_count() -> None:
    from ayo.scheduler.batching.admission import Admission

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

    from ayo.scheduler.runtime.serving_gc import configure_gc_for_serving, restore_gc

    before = gc.get_threshold()
    try:
        configure_gc_for_serving(young_threshold=20_000)
        assert gc.get_threshold()[0] == 20_000 and gc.get_freeze_count() > 0
    finally:
        restore_gc()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    with pytest.raises(ValueError, match="young_threshold"):
        configure_gc_for_serving(young_threshold=0)
