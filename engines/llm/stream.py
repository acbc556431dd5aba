"""DecodeStream: the async iterator ``LLMEngine.decode`` returns."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .outputs import DecodeEnd, DecodePiece


class DecodeStream:
    """Async iterator of :class:`DecodePiece`; ``end`` holds the :class:`DecodeEnd` once done.

    The decode starts when the stream is created, not when iteration begins. Leaving it early
    (``break``, ``aclose()``, cancelling the consuming task, or dropping the stream) aborts the
    decode and closes the sequence, so its KV blocks are freed within one engine step.
    """

    def __init__(self, seq_id: int, abort: Callable[[int, Callable], None]):
        self.seq_id = seq_id
        self._abort_fn = abort
        self._queue: asyncio.Queue = asyncio.Queue()
        self._done = False
        self.emit = self._put  # one bound object: the worker compares it by identity
        self.end: DecodeEnd | None = None

    def _put(self, item: object) -> None:
        self._queue.put_nowait(item)

    def __aiter__(self) -> DecodeStream:
        return self

    async def __anext__(self) -> DecodePiece:
        if self._done:
            raise StopAsyncIteration
        try:
            item = await self._queue.get()
        except asyncio.CancelledError:
            self._abort()
            raise
        if isinstance(item, DecodePiece):
            return item
        self._done = True
        if isinstance(item, BaseException):
            raise item
        self.end = item
        if item.error is not None:
            raise item.error
        raise StopAsyncIteration

    async def collect(self) -> DecodeEnd:
        """Consume the rest of the stream and return its end."""
        async for _ in self:
            pass
        assert self.end is not None
        return self.end

    async def aclose(self) -> None:
        self._abort()

    async def __aenter__(self) -> DecodeStream:
        return self

    async def __aexit__(self, *exc) -> None:
        self._abort()

    def _abort(self) -> None:
        if not self._done:
            self._done = True
            self._abort_fn(self.seq_id, self.emit)

    def __del__(self) -> None:
        if not getattr(self, "_done", True):
            self._abort()
