"""Per-worker torch thread budgets (``set_worker_threads``), checked in real threads."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
import torch

from ayo.engines.base import (
    BatchConfig,
    BatchingEngine,
    _openmp_pause,
    release_openmp_threads,
    set_worker_threads,
)


def _two_workers(setter) -> tuple[int, int]:
    """Worker B asks for 2 threads before any torch op; then worker A asks for 1; then B runs
    a parallel op. Returns (B's count after its op, A's count)."""
    b_set, a_set = threading.Event(), threading.Event()
    seen: dict[str, int] = {}
    x = torch.ones(1 << 16)

    def b() -> None:
        setter(2)
        b_set.set()
        a_set.wait(10)
        x.exp()  # a parallel op: torch's lazy per-thread init runs here at the latest
        seen["b"] = torch.get_num_threads()

    def a() -> None:
        b_set.wait(10)
        setter(1)
        seen["a"] = torch.get_num_threads()
        a_set.set()

    threads = [threading.Thread(target=b), threading.Thread(target=a)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return seen["b"], seen["a"]


def test_each_worker_keeps_its_own_budget():
    before = torch.get_num_threads()
    try:
        assert _two_workers(set_worker_threads) == (2, 1)
    finally:
        torch.set_num_threads(before)


def test_plain_set_num_threads_is_undone_by_a_later_worker():
    """Why the helper exists: torch's lazy init copies the last process-wide value, so a count
    set before a thread's first parallel op is lost when another thread sets a new one."""
    before = torch.get_num_threads()
    try:
        assert _two_workers(torch.set_num_threads) == (1, 1)
    finally:
        torch.set_num_threads(before)


def _os_threads() -> set[int]:
    """The process's OS thread ids. Tests compare sets, not counts: threads that other tests
    left behind may end at any moment and must not change what a test sees."""
    return {int(tid) for tid in os.listdir("/proc/self/task")}


needs_libgomp = pytest.mark.skipif(
    _openmp_pause() is None or not os.path.isdir("/proc/self/task"),
    reason="torch here does not ship libgomp (another OpenMP runtime) or no /proc",
)


@needs_libgomp
def test_release_openmp_threads_ends_the_calling_threads_team():
    """A thread that ran a 2-thread op holds an OpenMP worker thread; released, it is gone and
    the next parallel op starts a fresh team that computes the same."""
    seen: dict[str, object] = {}
    x = torch.arange(1 << 20, dtype=torch.float64)

    def work() -> None:
        set_worker_threads(2)
        before = _os_threads()
        seen["first"] = x.exp().sum().item()
        seen["team"] = _os_threads() - before
        release_openmp_threads()
        seen["left"] = seen["team"] & _os_threads()
        seen["again"] = x.exp().sum().item()

    t = threading.Thread(target=work)
    t.start()
    t.join(30)
    assert len(seen["team"]) >= 1  # the OpenMP worker(s) started by the 2-thread op
    assert seen["left"] == set()
    assert seen["again"] == seen["first"]


class _Exp(BatchingEngine[int, float]):
    """Sums exp over a large tensor with 2 torch threads per request."""

    def __init__(self) -> None:
        super().__init__("exp", BatchConfig(num_threads=2))
        self.x = torch.arange(1 << 20, dtype=torch.float64)
        self.worker_tid = 0
        self.threads_in_batch: set[int] = set()

    def run_batch(self, requests: list[int]) -> list[float]:
        out = [float((self.x * r).exp().sum()) for r in requests]
        self.worker_tid = threading.get_native_id()
        self.threads_in_batch = _os_threads()
        return out


@needs_libgomp
def test_an_idle_worker_holds_no_openmp_team():
    """Two idle teams in one process make libgomp throttle every team (the LLM's decode paid
    ~35% for the embedder's idle one), so a batching worker going idle releases its own."""
    engine = _Exp()

    async def main() -> float:
        return await engine.submit(1)

    try:
        before = _os_threads()
        assert asyncio.run(main()) == float(engine.x.exp().sum())
        started = engine.threads_in_batch - before
        team = started - {engine.worker_tid}
        assert engine.worker_tid in started
        assert team, "the 2-thread batch started no OpenMP worker"
        deadline = time.monotonic() + 10
        while team & _os_threads() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert team & _os_threads() == set()  # the team is gone
        assert engine.worker_tid in _os_threads()  # the worker alone, waiting for work
    finally:
        engine.close()
