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

from .pending_queue import make_queue
from .policies import BatchLimits, PendingRequest

_ONE = BatchLimits(max_items=1)


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
        self._queue = make_queue(policy, **policy_options)
        self._clock = clock
        self._held = 0
        self._seq = 0
        self._waiting: dict[int, asyncio.Future[None]] = {}

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
        self._waiting[id(request)] = fut
        self._queue.push(request)
        try:
            await fut
        except asyncio.CancelledError:
            if self._waiting.pop(id(request), None) is not None:
                self._queue.remove(request)  # still waiting: withdraw
            elif not fut.cancelled():
                self.release()  # granted just before the cancel arrived: give the slot back
            raise

    def release(self) -> None:
        self._held -= 1
        while self._waiting and self._held < self.limit:
            chosen = self._queue.take(_ONE, self._clock())[0]
            fut = self._waiting.pop(id(chosen))
            if not fut.done():
                self._held += 1
                fut.set_result(None)
