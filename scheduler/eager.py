"""Awaiting several coroutines at once without a task for those that never suspend.

An engine that answers at once (a cache hit, a fake, a zero-latency simulation) then costs the
runtime no task, no event-loop round trip; one that suspends goes on in a task of its own, as
with ``asyncio.gather``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


async def gather_eager(coros: list[Coroutine[Any, Any, Any]]) -> list[Any]:
    """``asyncio.gather(*coros, return_exceptions=True)``, but each coroutine first runs here,
    at once, up to its first suspension: one that finishes without suspending (an engine that
    answers at once) costs no task; the others go on as tasks. Cancelling this cancels them."""
    loop = asyncio.get_running_loop()
    out: list[Any] = [None] * len(coros)
    later: list[tuple[int, asyncio.Task[Any]]] = []
    for i, coro in enumerate(coros):
        try:
            waited = coro.send(None)
        except StopIteration as stop:
            out[i] = stop.value
        except (Exception, asyncio.CancelledError) as exc:
            out[i] = exc
        else:
            later.append((i, loop.create_task(resume(coro, waited))))
    try:
        for i, task in later:  # in order: usually one wake-up for all of them
            try:
                out[i] = await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # this call is being cancelled, not just that coroutine
                out[i] = asyncio.CancelledError()
            except Exception as exc:
                out[i] = exc
    except asyncio.CancelledError:
        for _, task in later:
            task.cancel()
        raise
    return out


async def resume(coro: Coroutine[Any, Any, Any], waited: Any) -> Any:
    """Run ``coro`` on from its suspension on ``waited`` (what it yielded: by asyncio's
    protocol a future, or None for a bare yield). A cancellation of this task cancels that
    future, which ``coro`` then sees, as it would in a task of its own."""
    while True:
        if waited is None:
            await asyncio.sleep(0)
        else:
            waited._asyncio_future_blocking = False  # taken over, as a task takes it
            try:
                await waited
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling() and not waited.cancelled():
                    # cancelled after ``waited`` finished: pass the cancellation into coro
                    try:
                        waited = coro.throw(asyncio.CancelledError())
                    except StopIteration as stop:
                        return stop.value
                    continue
            except Exception:
                pass  # the future's own error: coro reads it when resumed
        try:
            waited = coro.send(None)
        except StopIteration as stop:
            return stop.value
