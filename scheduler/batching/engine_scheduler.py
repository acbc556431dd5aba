"""Engine schedulers: one per engine instance, shared by every query.

A bounded queue of :class:`PendingRequest`, a batching policy, batch limits, backpressure; the
dispatcher is an asyncio task woken by events (a request arrived, a batch finished, the fill
timer fired), never by polling. The engine computes a batch however it likes (worker threads);
each request's future gets its own result or its own error.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .pending_queue import make_queue
from .policies import BatchLimits, PendingRequest

log = logging.getLogger(__name__)


class QueueFull(RuntimeError):
    """The engine's queue is at its limit and the caller asked not to wait (HTTP 429)."""


class EngineStopped(RuntimeError):
    """The engine scheduler stopped before the request ran."""


class BatchRunner(Protocol):
    """What an engine scheduler drives: compute one batch, one result or error per payload."""

    async def run_batch(self, payloads: list[Any]) -> Sequence[Any]:
        """Results in payload order; an item may be an exception instance, which fails only
        that request. Raising fails the whole batch (and only it)."""
        ...


@dataclass(eq=False, slots=True)
class BatchRecord:
    """One finished batch, for traces and metrics (times from the scheduler's clock)."""

    engine: str
    requests: tuple[PendingRequest, ...]
    started: float
    ended: float
    ok: bool


class _RequestFuture(asyncio.Future):
    """A queued request's future; cancelling it (its waiter was cancelled, or a timeout fired)
    withdraws the request from the queue if it has not started."""

    __slots__ = ("_request", "_scheduler")  # set by EngineScheduler.enqueue (no Python __init__)

    _request: PendingRequest
    _scheduler: EngineScheduler

    def cancel(self, msg: Any = None) -> bool:
        if not super().cancel(msg=msg):
            return False
        self._scheduler._withdraw(self._request)
        return True


class EngineScheduler:
    """Queue + policy + limits in front of one engine instance.

    Args:
        engine: the batch runner.
        name: engine instance name (traces, errors, metrics).
        policy: ``fcfs``, ``depth`` or ``critical_path`` (see :mod:`.batching`).
        limits: per-batch limits.
        max_queue: pending requests beyond which ``submit`` waits (or raises QueueFull).
        max_inflight: batches the engine may compute at once (1 for a serial engine; more for
            an engine that batches internally, like the LLM engine's continuous batching).
        on_batch: called with each finished :class:`BatchRecord`.
        clock: seconds, monotonic; injectable for simulation.
    """

    def __init__(
        self,
        engine: BatchRunner,
        name: str,
        *,
        policy: str = "fcfs",
        limits: BatchLimits | None = None,
        max_queue: int = 1024,
        max_inflight: int = 1,
        on_batch: Callable[[BatchRecord], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        **policy_options: float,
    ) -> None:
        if max_queue < 1 or max_inflight < 1:
            raise ValueError("max_queue and max_inflight must be >= 1")
        self.engine = engine
        self.name = name
        self.policy = policy
        self.limits = limits or BatchLimits()
        self.max_queue = max_queue
        self.max_inflight = max_inflight
        self._pending = make_queue(policy, **policy_options)
        self._live = self._pending.live  # its length is the queue's, without a Python call
        self._on_batch = on_batch
        self._clock = clock
        self._seq = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._sleeping = False  # the dispatcher waits on _wake for a request
        self._space = asyncio.Event()
        self._space.set()
        self._inflight = 0
        self._running: set[asyncio.Task] = set()
        self._task: asyncio.Task | None = None
        self.batches = 0
        self.items = 0
        # Called when the scheduler becomes idle (nothing queued or running), by whoever
        # watches it (the LLM proxy, to compute held prefills in idle gaps).
        self.on_idle: Callable[[], None] | None = None

    # -- public ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._loop = asyncio.get_running_loop()
            self._task = self._loop.create_task(self._dispatch_loop())

    async def stop(self) -> None:
        """Stop dispatching; pending requests fail with EngineStopped, running batches finish."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for r in self._pending:
            fut, r.future = r.future, None
            if fut is not None and not fut.done():
                fut.set_exception(EngineStopped(f"engine {self.name!r} stopped"))
        self._pending.clear()
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    @property
    def queue_length(self) -> int:
        return len(self._pending)

    @property
    def load(self) -> int:
        """Pending plus in-flight batches: what load balancing compares."""
        return len(self._pending) + self._inflight

    async def submit(self, request: PendingRequest, *, wait: bool = True) -> Any:
        """Queue ``request`` and wait for its result (or its error).

        With the queue full, waits for space (backpressure) or, with ``wait=False``, raises
        :class:`QueueFull`. Cancelling the returned wait withdraws a request not yet running.
        """
        while len(self._live) >= self.max_queue:
            if not wait:
                raise QueueFull(f"engine {self.name!r} queue is full ({self.max_queue})")
            self._space.clear()
            await self._space.wait()
        return await self.enqueue(request)

    def enqueue(self, request: PendingRequest) -> Awaitable[Any]:
        """:meth:`submit` as an awaitable without a coroutine of its own: with room in the
        queue, the request's future (cancelling it withdraws the request); else ``submit``."""
        if len(self._live) >= self.max_queue:
            return self.submit(request)
        request.seq = next(self._seq)
        request.enqueued_at = self._clock()
        fut = request.future = _RequestFuture(loop=self._loop or asyncio.get_running_loop())
        fut._scheduler, fut._request = self, request
        self._pending.push(request)
        if self._sleeping:  # the dispatcher waits for this
            self._sleeping = False
            self._wake.set()
        return fut

    def _withdraw(self, request: PendingRequest) -> None:
        """The caller gave up (cancelled): drop the request unless it is already running."""
        if self._pending.remove(request):
            request.future = None
            self._space.set()
            self._idle_check()

    def _idle_check(self) -> None:
        if self.on_idle is not None and not self._live and not self._inflight:
            self.on_idle()

    def stats(self) -> dict[str, float]:
        return {
            "queue_length": len(self._pending),
            "inflight_batches": self._inflight,
            "batches": self.batches,
            "items": self.items,
            "mean_batch_items": self.items / self.batches if self.batches else 0.0,
        }

    # -- dispatch -------------------------------------------------------------------------
    async def _dispatch_loop(self) -> None:
        while True:
            while not self._live or self._inflight >= self.max_inflight:
                self._wake.clear()
                self._sleeping = True
                await self._wake.wait()
            await self._fill_wait()
            if not self._live:
                continue
            items = self._pending.items
            batch = self._pending.take(self.limits, self._clock())
            items -= self._pending.items
            self._space.set()
            self._inflight += 1
            task = asyncio.get_running_loop().create_task(self._run(batch, items))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _fill_wait(self) -> None:
        """With ``max_wait_ms``, give a partial batch until its oldest request has waited that
        long to fill up; wakes early when it fills."""
        if self.limits.max_wait_ms <= 0:
            return
        deadline = self._pending.oldest_enqueued() + self.limits.max_wait_ms / 1e3
        while self._pending.items < self.limits.max_items:
            remaining = deadline - self._clock()
            if remaining <= 0:
                return
            self._wake.clear()
            self._sleeping = True
            try:
                await asyncio.wait_for(self._wake.wait(), remaining)
            except asyncio.TimeoutError:
                return

    async def _run(self, batch: list[PendingRequest], items: int) -> None:
        started = self._clock()
        ok = True
        try:
            results = await self.engine.run_batch([r.payload for r in batch])
            if len(results) != len(batch):
                raise RuntimeError(
                    f"engine {self.name!r} returned {len(results)} results for {len(batch)}"
                )
        except Exception as exc:  # the whole batch failed: each of its queries gets the cause
            log.warning("engine %s: batch of %d failed: %r", self.name, len(batch), exc)
            results = [exc] * len(batch)
            ok = False
        finally:
            self._inflight -= 1
            self._wake.set()
        self.batches += 1
        self.items += items
        for r, res in zip(batch, results):
            fut, r.future = r.future, None  # no request <-> future cycle left behind
            if fut is None or fut.done():
                continue  # the query was cancelled meanwhile
            if isinstance(res, BaseException):
                fut.set_exception(res)
            else:
                fut.set_result(res)
        if self._on_batch is not None:
            self._on_batch(BatchRecord(self.name, tuple(batch), started, self._clock(), ok))
        self._idle_check()


class EnginePool:
    """Several instances of one engine behind one submit: each request goes to the instance with
    the least load (queue + running batches, plus ``extra_load`` such as KV-cache usage)."""

    def __init__(
        self,
        schedulers: Sequence[EngineScheduler],
        extra_load: Callable[[EngineScheduler], float] | None = None,
    ) -> None:
        if not schedulers:
            raise ValueError("an engine pool needs at least one instance")
        self.schedulers = list(schedulers)
        self._extra = extra_load

    def pick(self) -> EngineScheduler:
        def load(s: EngineScheduler) -> float:
            return s.load + (self._extra(s) if self._extra else 0.0)

        return min(self.schedulers, key=load)

    async def submit(self, request: PendingRequest, *, wait: bool = True) -> Any:
        return await self.pick().submit(request, wait=wait)

    def enqueue(self, request: PendingRequest) -> Awaitable[Any]:
        return self.pick().enqueue(request)

    def start(self) -> None:
        for s in self.schedulers:
            s.start()

    async def stop(self) -> None:
        await asyncio.gather(*(s.stop() for s in self.schedulers))
