"""BatchingEngine: batches computed as given (the runtime's engine scheduler forms them), per-request
errors, stats, background work, close."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ayo.engines import BatchConfig, BatchingEngine, EngineClosed, InvalidRequest


class Doubler(BatchingEngine[int, int]):
    """Doubles ints; 999 poisons a whole batch (a crash inside the compute)."""

    def __init__(self) -> None:
        super().__init__("doubler")
        self.gate = threading.Event()
        self.sizes: list[int] = []
        self.threads: set[str] = set()

    def validate(self, request: int) -> None:
        if request < 0:
            raise InvalidRequest(f"negative: {request}")

    def run_batch(self, requests: list[int]) -> list[int | BaseException]:
        self.gate.wait(5)
        self.sizes.append(len(requests))
        self.threads.add(threading.current_thread().name)
        if 999 in requests:
            raise RuntimeError("unlucky")
        return [r * 2 if r != 7 else InvalidRequest("seven") for r in requests]


async def test_each_batch_runs_as_given_in_the_order_it_came():
    """The engine re-forms nothing: three callers' batches run as three rounds, in order (the
    runtime's engine scheduler decided them), on the engine's one worker thread."""
    engine = Doubler()
    tasks = [
        asyncio.create_task(engine.submit_many(batch, return_exceptions=True))
        for batch in (list(range(10)), [10, 11], list(range(12, 30)))
    ]
    await asyncio.sleep(0)  # all queued before the worker is released
    engine.gate.set()
    results = [r for batch in await asyncio.gather(*tasks) for r in batch]
    assert results[7].__class__ is InvalidRequest
    assert [r for i, r in enumerate(results) if i != 7] == [2 * i for i in range(30) if i != 7]
    assert engine.sizes == [10, 2, 18]
    assert engine.threads == {"ayo-doubler"}
    stats = engine.stats()
    assert (stats.submitted, stats.completed, stats.failed, stats.batches) == (30, 29, 1, 3)
    engine.close()


async def test_a_crashing_request_fails_alone():
    engine = Doubler()
    engine.gate.set()
    results = await engine.submit_many([1, 999, 2, -1], return_exceptions=True)
    assert results[0] == 2 and results[2] == 4
    assert isinstance(results[1], RuntimeError) and isinstance(results[3], InvalidRequest)
    assert engine.sizes == [3, 1, 2, 1, 1]  # the valid three, then halves down to the culprit
    assert await engine.submit(5) == 10  # still serving
    with pytest.raises(InvalidRequest):
        await engine.submit_many([1, -2])
    engine.close()


async def test_close_refuses_new_work():
    engine = Doubler()
    engine.gate.set()
    assert await engine.submit_many([1, 2, 3, 4, 5]) == [2, 4, 6, 8, 10]
    await engine.stop()
    with pytest.raises(EngineClosed):
        await engine.submit(1)


async def test_cancelled_requests_are_skipped():
    engine = Doubler()
    first = asyncio.create_task(engine.submit(1))
    await asyncio.sleep(0)
    doomed = asyncio.create_task(engine.submit(2))
    await asyncio.sleep(0)
    doomed.cancel()
    engine.gate.set()
    assert await first == 2
    assert await engine.submit(3) == 6
    assert 2 not in [s for s in engine.sizes if s > 1]
    engine.close()


async def test_background_work_yields_to_interactive_requests():
    """Bulk work (ingest) runs max_background_items per round and only when nothing else waits:
    a request arriving behind 40 background ones waits for at most one round."""
    engine = Doubler()
    engine.batch_config = BatchConfig(max_background_items=4)
    order: list[int] = []
    real = engine.run_batch

    def run_batch(requests):
        order.extend(requests)
        return real(requests)

    engine.run_batch = run_batch
    bulk = asyncio.ensure_future(engine.submit_many(list(range(100, 140)), background=True))
    await asyncio.sleep(0.05)  # the worker took its first round and waits on the gate
    urgent = asyncio.ensure_future(engine.submit(1))
    await asyncio.sleep(0.05)
    engine.gate.set()
    assert await urgent == 2 and await bulk == [2 * i for i in range(100, 140)]
    assert order.index(1) <= 4  # after the first background round, before all the others
    assert max(engine.sizes) <= 4
    # close() fails background work still queued (not acknowledged) instead of finishing it
    engine.gate.clear()
    doomed = asyncio.ensure_future(engine.submit_many(list(range(200, 240)), background=True))
    await asyncio.sleep(0.05)
    engine.gate.set()
    engine.close()
    with pytest.raises(EngineClosed):
        await doomed


async def test_background_work_waits_for_its_gate_at_most_a_bounded_time(monkeypatch):
    from ayo.engines import base

    monkeypatch.setattr(base, "BACKGROUND_MAX_DEFER_S", 0.3)
    engine = Doubler()
    engine.gate.set()
    busy = [True]
    engine.background_gate = lambda: not busy[0]
    start = time.perf_counter()
    assert await engine.submit_many([1, 2], background=True) == [2, 4]
    assert time.perf_counter() - start >= 0.3  # held back while "busy", then run anyway
    assert await engine.submit(3) == 6  # interactive work never waits for the gate
    busy[0] = False
    start = time.perf_counter()
    assert await engine.submit_many([4], background=True) == [8]
    assert time.perf_counter() - start < 0.25
    engine.close()


def test_importing_the_package_loads_no_heavy_dependency():
    import subprocess
    import sys

    code = (
        "import sys, ayo.engines as e; assert 'Embedder' in e.__all__; "
        "print(sorted(m for m in ('torch', 'faiss', 'transformers', 'bm25s') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
