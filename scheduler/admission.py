"""Admission to a bounded engine resource (an LLM's running decodes, bounded by its KV cache),
in the order of a batching policy.

At most ``limit`` requests hold the resource; the others wait, and each time one is released the
policy (``fcfs``, ``depth``, ``critical_path``) picks which waiting request goes next. Woken by
releases, never by polling; a cancelled waiter is withdrawn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from .batching import PendingRequest, make_order


class Admission:
    """A policy-ordered semaphore. ``acquire(request)`` waits for a slot; ``release()`` frees it.

    Args:
        name: for errors and stats.
        limit: slots (e.g. the LLM's maximum running sequences).
        policy: which waiting request is admitted next.
        clock: the schedulers' clock.
    """

    def __init__(
        self,
        name: str,
        limit: int,
        policy: str = "fcfs",
        clock: Callable[[], float] = time.monotonic,
        **policy_options: float,
    ) -> None:
        if limit < 1:
            raise ValueError(f"admission {name!r}: limit must be >= 1, got {limit}")
        self.name = name
        self.limit = limit
        self._order = make_order(policy, **policy_options)
        self._clock = clock
        self._held = 0
        self._seq = 0
        self._waiting: dict[int, tuple[PendingRequest, asyncio.Future[None]]] = {}

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def held(self) -> int:
        return self._held

    async def acquire(self, request: PendingRequest) -> None:
        self._seq += 1
        request.seq = self._seq
        request.enqueued_at = self._clock()
        if self._held < self.limit and not self._waiting:
            self._held += 1
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiting[id(request)] = (request, fut)
        try:
            await fut
        except asyncio.CancelledError:
            if self._waiting.pop(id(request), None) is None and fut.done():
                self.release()  # granted just before the cancel arrived: give the slot back
            raise

    def release(self) -> None:
        self._held -= 1
        while self._waiting and self._held < self.limit:
            pending = [r for r, _ in self._waiting.values()]
            chosen = self._order(pending, self._clock())[0]
            _, fut = self._waiting.pop(id(chosen))
            if not fut.done():
                self._held += 1
                fut.set_result(None)
