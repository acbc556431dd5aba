"""The LLM proxy: one name over one or more LLM engine instances.

A sequence stays on the instance that opened it (its KV cache lives there); ``open`` picks the
instance with the least load (its own ``kv_usage()`` when it reports one, then open sequences,
then queued prefills). Prefills go through the instance's engine scheduler, so the batching
policy orders them when the engine is saturated; the engine batches running prefills and decode
steps itself (continuous batching). Decodes pass straight through, reported as trace records and,
piece by piece, to the query (for streamed answers).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .admission import Admission
from .batched import PrefillCall, Submitter
from .engine_api import DecodeParams
from .engine_scheduler import BatchRecord
from .request_info import CURRENT, make_request


@dataclass(eq=False)
class PooledSeq:
    """A sequence of instance ``instance`` (only used with more than one instance)."""

    instance: int
    seq: Any


class BatchedLLM:
    """``LLM`` interface over ``instances`` (same model and tokenizer).

    Args:
        name: engine name (trace rows: ``name`` or ``name#i`` per instance).
        instances: LLM engines.
        schedulers: one prefill scheduler per instance, or None to call prefill directly.
        admissions: per instance, bounds its running decodes (KV cache) and admits waiting
            ones in policy order; None: no bound.
        on_batch: receives a :class:`BatchRecord` per finished decode.
        clock: the schedulers' clock.
    """

    def __init__(
        self,
        name: str,
        instances: Sequence[Any],
        schedulers: Sequence[Submitter] | None = None,
        admissions: Sequence[Admission] | None = None,
        *,
        on_batch: Callable[[BatchRecord], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not instances:
            raise ValueError(f"LLM {name!r} needs at least one instance")
        if schedulers is not None and len(schedulers) != len(instances):
            raise ValueError(f"LLM {name!r}: one scheduler per instance")
        self.name = name
        self.instances = list(instances)
        self.schedulers = list(schedulers) if schedulers is not None else None
        if admissions is not None and len(admissions) != len(instances):
            raise ValueError(f"LLM {name!r}: one admission per instance")
        self.admissions = list(admissions) if admissions is not None else None
        self.tokenizer = self.instances[0].tokenizer
        self.on_batch = on_batch
        self._clock = clock
        self._open = [0] * len(self.instances)
        self._rows = (
            [name] if len(instances) == 1 else [f"{name}#{i}" for i in range(len(instances))]
        )

    @property
    def open_sequences(self) -> int:
        return sum(self._open)

    def _pick(self) -> int:
        if len(self.instances) == 1:
            return 0

        def load(i: int) -> tuple[float, int, int]:
            usage = getattr(self.instances[i], "kv_usage", None)
            queued = getattr(self.schedulers[i], "load", 0) if self.schedulers else 0
            return (float(usage()) if callable(usage) else 0.0, self._open[i], queued)

        return min(range(len(self.instances)), key=load)

    def _route(self, seq: Any) -> tuple[int, Any]:
        if isinstance(seq, PooledSeq):
            return seq.instance, seq.seq
        return 0, seq

    async def open(self) -> Any:
        i = self._pick()
        raw = await self.instances[i].open()
        self._open[i] += 1
        return raw if len(self.instances) == 1 else PooledSeq(i, raw)

    async def close(self, seq: Any) -> None:
        i, raw = self._route(seq)
        await self.instances[i].close(raw)
        self._open[i] = max(0, self._open[i] - 1)

    def prefill(self, seq: Any, tokens: list[int]) -> Awaitable[None]:
        """Awaitable (the queued request's future, as in ``ayo.scheduler.batched``)."""
        i, raw = self._route(seq)
        if self.schedulers is None:
            return self.instances[i].prefill(raw, tokens)
        request = make_request(PrefillCall(raw, list(tokens)), 1, len(tokens))
        return self.schedulers[i].enqueue(request)

    async def decode(self, seq: Any, params: DecodeParams) -> AsyncIterator[Any]:
        i, raw = self._route(seq)
        info = CURRENT.get()
        enqueued = self._clock()
        admission = self.admissions[i] if self.admissions is not None else None
        if admission is not None:
            await admission.acquire(make_request(None))
        started = self._clock()
        pieces, ok = 0, False
        try:
            async for piece in self.instances[i].decode(raw, params):
                pieces += 1
                if info is not None:
                    info.query.decoded(info.node_id, piece)
                yield piece
            ok = True
        finally:
            if admission is not None:
                admission.release()
            if self.on_batch is not None:
                request = make_request(None, 1, pieces)
                request.enqueued_at = enqueued
                self.on_batch(BatchRecord(self._rows[i], (request,), started, self._clock(), ok))
