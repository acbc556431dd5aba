"""BatchingEngine: cross-request batching, per-request errors, stats, unit batches, close."""

from __future__ import annotations

import asyncio
import threading

import pytest

from ayo.engines import BatchConfig, BatchingEngine, EngineClosed, InvalidRequest


class Doubler(BatchingEngine[int, int]):
    """Doubles ints; 999 poisons a whole batch (a crash inside the compute)."""

    def __init__(self, max_items: int = 64) -> None:
        super().__init__("doubler", BatchConfig(max_batch_items=max_items))
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


async def test_requests_of_many_callers_share_batches():
    engine = Doubler()
    tasks = [asyncio.create_task(engine.submit(i)) for i in range(30)]
    await asyncio.sleep(0)  # all queued before the worker is released
    engine.gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[7].__class__ is InvalidRequest
    assert [r for i, r in enumerate(results) if i != 7] == [2 * i for i in range(30) if i != 7]
    assert sum(engine.sizes) == 30 and len(engine.sizes) <= 3
    assert engine.threads == {"ayo-doubler"}
    stats = engine.stats()
    assert (stats.submitted, stats.completed, stats.failed) == (30, 29, 1)
    engine.close()


async def test_a_crashing_request_fails_alone():
    engine = Doubler()
    engine.gate.set()
    results = await engine.submit_many([1, 999, 2, -1], return_exceptions=True)
    assert results[0] == 2 and results[2] == 4
    assert isinstance(results[1], RuntimeError) and isinstance(results[3], InvalidRequest)
    assert await engine.submit(5) == 10  # still serving
    with pytest.raises(InvalidRequest):
        await engine.submit_many([1, -2])
    engine.close()


async def test_submit_batch_runs_as_one_round_and_close():
    engine = Doubler(max_items=2)
    engine.gate.set()
    assert await engine.submit_batch([1, 2, 3, 4, 5]) == [2, 4, 6, 8, 10]
    assert engine.sizes == [5]  # a unit ignores max_batch_items
    engine.close()
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


def test_importing_the_package_loads_no_heavy_dependency():
    import subprocess
    import sys

    code = (
        "import sys, ayo.engines as e; assert 'Embedder' in e.__all__; "
        "print(sorted(m for m in ('torch', 'faiss', 'transformers', 'bm25s') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
