"""The shape every non-LLM engine shares: an async front, a worker thread behind it.

The runtime's engine scheduler decides which requests form a batch and in what order; the engine
executes what it is given. ``await engine.submit_many(requests)`` hands one batch to the worker
thread, which computes it in :meth:`BatchingEngine.run_batch` (torch and faiss release the GIL)
and hands each result back to the loop that asked with ``loop.call_soon_threadsafe``. Batches run
one at a time, in the order they came. Nothing polls: the worker sleeps on a condition variable,
callers on futures. Bulk work (``background=True``: a corpus ingest) runs only when no batch is
waiting, ``max_background_items`` requests per round.

Errors are per request: ``validate`` rejects a bad request before it is queued, ``run_batch``
may return an exception in a request's slot, and if ``run_batch`` itself raises, the batch is
re-run in halves (``isolation.run_isolated``) so only the culprit fails. The engine keeps
serving either way.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from .errors import EngineClosed, EngineError
from .isolation import run_isolated

logger = logging.getLogger(__name__)

Req = TypeVar("Req")
Res = TypeVar("Res")


def set_worker_threads(num_threads: int) -> None:
    """Give the calling thread ``num_threads`` torch intra-op (OpenMP) threads.

    The count is per OS thread, but a thread takes the process-wide value last set by *any*
    thread at its first parallel op (torch's lazy per-thread init), which would silently undo a
    count set before that op. So run the lazy init first (``get_num_threads``), then set.
    ``set_num_threads`` also changes that process-wide value, which threads initialized later
    inherit.
    """
    import torch

    torch.get_num_threads()
    torch.set_num_threads(num_threads)


@functools.cache
def _openmp_pause():
    """``omp_pause_resource_all`` of the libgomp torch ships, or None (another OpenMP runtime)."""
    import torch

    lib = Path(torch.__file__).parent / "lib" / "libgomp.so.1"
    try:
        return ctypes.CDLL(str(lib)).omp_pause_resource_all if lib.exists() else None
    except (OSError, AttributeError) as exc:
        logger.debug("no omp_pause_resource_all in %s: %s", lib, exc)
        return None


def release_openmp_threads() -> None:
    """Let the calling thread's idle OpenMP team go (``omp_pause_resource_all(omp_pause_soft)``).

    libgomp keeps a team of worker threads for every thread that ran a parallel torch op. Once
    the process holds more of them than it has CPUs, libgomp throttles all teams: their
    workers sleep after ~100 spins instead of ~300k, so every parallel op pays a futex wake.
    Measured on 2 cores: one decode step of the 135M model took 31-33 ms with one team in the
    process and 42-47 ms once a second, idle one existed (an embedder worker, or the thread that
    loaded the model). So a thread that is done with torch for a while (a worker going idle, a
    loader) releases its team; its next parallel op starts a fresh one (~0.1 ms).
    """
    pause = _openmp_pause()
    if pause is not None:
        pause(1)  # omp_pause_soft


class LocalEngine:
    """What an engine in this process answers beside its kind's methods (the ``Engine``
    protocol of ``ayo.scheduler.ir.engine_api``): no workers to start by default, and a
    ``/health`` row that says it runs here."""

    async def start(self) -> None:
        """Nothing to start: workers start on first use."""

    async def stop(self) -> None:
        """Nothing to stop."""

    async def health(self, timeout_s: float = 2.0) -> dict[str, object]:
        return {"where": "local", "state": "alive"}


@dataclass(frozen=True)
class BatchConfig:
    """Settings of the worker.

    Attributes:
        max_background_items: most background requests (bulk ingest) in one round: a batch
            from the runtime waits at most one such round.
        num_threads: torch intra-op threads the worker thread uses (None: leave torch's setting).
    """

    max_background_items: int = 8
    num_threads: int | None = None

    def __post_init__(self) -> None:
        if self.max_background_items < 1:
            raise ValueError(f"max_background_items must be >= 1, got {self.max_background_items}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1 or None, got {self.num_threads}")


@dataclass
class EngineStats:
    """Counters of one engine since it was built (a snapshot; safe to keep)."""

    name: str
    submitted: int = 0  # requests accepted into the queue
    completed: int = 0  # requests that got a result
    failed: int = 0  # requests that got an error (validation included)
    batches: int = 0  # batches computed (a batch re-run in halves counts once)
    busy_s: float = 0.0  # seconds the worker spent computing
    queue_depth: int = 0  # requests waiting right now
    extra: dict[str, float] = field(default_factory=dict)  # engine-specific counters

    @property
    def mean_batch(self) -> float:
        """Mean requests per round."""
        return (self.completed + self.failed) / self.batches if self.batches else 0.0


@dataclass
class _Pending(Generic[Req]):
    request: Req
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


def _deliver(future: asyncio.Future, result: object) -> None:
    if future.done():  # cancelled by its caller meanwhile
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


BACKGROUND_POLL_S = 0.02
BACKGROUND_MAX_DEFER_S = 1.0


class BatchingEngine(LocalEngine, Generic[Req, Res]):
    """Base of the embedder, the cross-encoder scorer, the vector index and keyword engines.

    Subclasses implement :meth:`run_batch` (worker thread) and optionally :meth:`validate`
    (event loop, cheap) and :meth:`on_worker_start`. The worker thread starts on first use.
    """

    def __init__(self, name: str, batch: BatchConfig | None = None) -> None:
        self.name = name
        self.batch_config = batch or BatchConfig()
        self._cond = threading.Condition()
        self._queue: collections.deque[list[_Pending[Req]]] = collections.deque()  # batches
        self._background: collections.deque[_Pending[Req]] = collections.deque()
        # Called by the worker: False while other work (in other engines) should have the
        # cores, e.g. requests in flight on a server; background rounds then wait for it.
        self.background_gate: Callable[[], bool] | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self._stats = EngineStats(name=name)
        self._stats_lock = threading.Lock()

    # -- to implement -------------------------------------------------------------------------
    def validate(self, request: Req) -> None:
        """Raise ``InvalidRequest`` for a request that can never succeed. Runs on the caller."""

    def run_batch(self, requests: list[Req]) -> list[Res | BaseException]:
        """Compute a batch in the worker thread: one result or exception per request, in order."""
        raise NotImplementedError

    def on_worker_start(self) -> None:
        """Per-thread set-up in the worker (torch threads, ...)."""

    # -- async API ----------------------------------------------------------------------------
    async def submit(self, request: Req) -> Res:
        """Compute one request (a batch of one); its result, or its error raised."""
        return (await self.submit_many([request]))[0]  # type: ignore[return-value]

    async def submit_many(
        self,
        requests: Sequence[Req],
        *,
        return_exceptions: bool = False,
        background: bool = False,
    ) -> list[Res | BaseException]:
        """Compute ``requests`` as one batch, exactly as given; results in order.

        Raises the first error unless ``return_exceptions`` (then errors sit in their slots).
        ``background`` requests (bulk work such as ingest) run only when no batch is waiting,
        ``max_background_items`` per round.
        """
        futures = self._futures(requests, background)
        results = await asyncio.gather(*futures, return_exceptions=True)
        if not return_exceptions:
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        return list(results)

    def _futures(self, requests: Sequence[Req], background: bool) -> list[asyncio.Future]:
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future] = []
        accepted: list[_Pending[Req]] = []
        for request in requests:
            future = loop.create_future()
            futures.append(future)
            try:
                self.validate(request)
            except EngineError as err:
                future.set_exception(err)
                self._count(failed=1)
                continue
            accepted.append(_Pending(request, future, loop))
        if accepted:
            self._put(accepted, background)
        return futures

    def _put(self, items: list[_Pending[Req]], background: bool) -> None:
        with self._cond:
            if self._closed:
                raise EngineClosed(f"engine {self.name!r} is closed")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._worker, name=f"ayo-{self.name}", daemon=True
                )
                self._thread.start()
            if background:
                self._background.extend(items)
            else:
                self._queue.append(items)
            self._stats.submitted += len(items)
            self._cond.notify()

    def _background_may_run(self, deferred_s: float) -> bool:
        """Background work runs when ``background_gate`` allows it (None: always) or after it
        has been held back ``BACKGROUND_MAX_DEFER_S`` (bulk work never starves)."""
        gate = self.background_gate
        return gate is None or deferred_s >= BACKGROUND_MAX_DEFER_S or bool(gate())

    # -- worker -------------------------------------------------------------------------------
    def _take(self) -> list[_Pending[Req]] | None:
        deferred_since: float | None = None
        with self._cond:
            while True:
                while not self._queue and not self._background and not self._closed:
                    self._cond.wait()
                if self._queue:
                    break
                if not self._background:
                    return None
                now = time.monotonic()
                deferred_since = deferred_since or now
                if self._background_may_run(now - deferred_since):
                    n = min(len(self._background), self.batch_config.max_background_items)
                    return [self._background.popleft() for _ in range(n)]
                self._cond.wait(BACKGROUND_POLL_S)
            return self._queue.popleft()

    def _worker(self) -> None:
        if self.batch_config.num_threads is not None:
            set_worker_threads(self.batch_config.num_threads)
        self.on_worker_start()
        while True:
            with self._cond:
                idle = not self._queue and not self._background
            if idle:
                release_openmp_threads()
            if (taken := self._take()) is None:
                break
            live = [p for p in taken if not p.future.cancelled()]
            if not live:
                continue
            results = self.execute([p.request for p in live])
            for pending, result in zip(live, results):
                try:
                    pending.loop.call_soon_threadsafe(_deliver, pending.future, result)
                except RuntimeError:  # the caller's loop is closed: nobody is waiting
                    logger.debug("%s: dropped a result for a closed event loop", self.name)

    def execute(self, requests: list[Req]) -> list[Res | BaseException]:
        """Run one batch synchronously with per-request error isolation (any thread)."""
        start = time.perf_counter()
        results = self._compute(requests)
        failed = sum(isinstance(r, BaseException) for r in results)
        self._count(
            batches=1,
            completed=len(results) - failed,
            failed=failed,
            busy_s=time.perf_counter() - start,
        )
        return results

    def _compute(self, requests: list[Req]) -> list[Res | BaseException]:
        return run_isolated(requests, self.run_batch, self.name)  # type: ignore[arg-type]

    # -- stats / lifecycle --------------------------------------------------------------------
    def _count(self, **delta: float) -> None:
        with self._stats_lock:
            for key, value in delta.items():
                setattr(self._stats, key, getattr(self._stats, key) + value)

    def _count_extra(self, **delta: float) -> None:
        with self._stats_lock:
            for key, value in delta.items():
                self._stats.extra[key] = self._stats.extra.get(key, 0) + value

    def stats(self) -> EngineStats:
        """A snapshot of the engine's counters."""
        with self._stats_lock, self._cond:
            snap = EngineStats(**{**self._stats.__dict__, "extra": dict(self._stats.extra)})
            snap.queue_depth = len(self._background) + sum(len(b) for b in self._queue)
        return snap

    async def stop(self) -> None:
        """:meth:`close`, off the event loop."""
        await asyncio.to_thread(self.close)

    def close(self, timeout: float | None = 10.0) -> None:
        """Stop accepting requests; finish the queued interactive ones, fail the background
        ones with ``EngineClosed`` (bulk work is not acknowledged yet); join the worker."""
        closed = EngineClosed(f"engine {self.name!r} is closed")
        with self._cond:
            self._closed = True
            dropped, self._background = list(self._background), collections.deque()
            self._cond.notify_all()
            thread = self._thread
        for pending in dropped:
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed already
                pending.loop.call_soon_threadsafe(_deliver, pending.future, closed)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
