"""Per-worker torch thread budgets (``set_worker_threads``), checked in real threads."""

from __future__ import annotations

import threading

import torch

from ayo.engines.base import set_worker_threads


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
