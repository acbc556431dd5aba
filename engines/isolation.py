"""Failure isolation by re-running: the one helper every batching layer uses.

A batch that raises as a whole is split in halves and each half re-run, down to single items,
so only the items whose own run fails get an error and every other item its result. Re-running
must be safe: a run only writes what belongs to its own items (the LLM engine's forward pass
rewrites only its chunks' KV slots; an embedding or a search has no effect at all).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


def run_isolated(
    items: Sequence[T], run: Callable[[Sequence[T]], list[R]], what: str = "batch"
) -> list[R | Exception]:
    """``run(items)``: one result per item; when it raises, halves are re-run, and an item
    that fails alone gets its exception in its slot."""
    try:
        results = run(items)
        if len(results) != len(items):
            raise RuntimeError(f"{what}: {len(results)} results for {len(items)} items")
        return list(results)
    except Exception as exc:
        if len(items) == 1:
            return [exc]
        log.info("%s of %d failed (%r); isolating", what, len(items), exc)
    half = len(items) // 2
    return run_isolated(items[:half], run, what) + run_isolated(items[half:], run, what)


async def run_isolated_async(
    items: Sequence[T], run: Callable[[Sequence[T]], Awaitable[list[R]]], what: str = "batch"
) -> list[R | Exception]:
    """:func:`run_isolated` for an async ``run`` (the runtime's merged engine calls)."""
    try:
        results = await run(items)
        if len(results) != len(items):
            raise RuntimeError(f"{what}: {len(results)} results for {len(items)} items")
        return list(results)
    except Exception as exc:
        if len(items) == 1:
            return [exc]
        log.info("%s of %d failed (%r); isolating", what, len(items), exc)
    half = len(items) // 2
    return await run_isolated_async(items[:half], run, what) + await run_isolated_async(
        items[half:], run, what
    )
