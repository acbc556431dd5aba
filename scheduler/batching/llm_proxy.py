"""The LLM proxy: one name over one or more LLM engine instances.

The LLM engine orders and batches its own work: every engine step takes prefill chunks and
decode tokens of many sequences under one token budget, in the order the runtime's policy gives
it (``set_step_order``), so prefills and decodes go to the engine directly, each carrying its
primitive's request info; nothing queues them a second time here. What this proxy adds:

- **Replicas**: a sequence stays on the instance that opened it (its KV cache lives there);
  ``open`` picks the instance with the least load (its KV usage, then open sequences, then
  prefills in flight).
- **KV admission** (optional): at most ``limit`` decodes run at once per instance, the waiting
  ones admitted in policy order (``Admission``).
- **Traces and metrics**: a :class:`BatchRecord` per prefill, decode and score; decoded pieces
  go to the query as they come (streamed answers).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ayo.engines.llm.outputs import DecodeEnd, DecodePiece
from ayo.engines.llm.sampling import SamplingParams

from ..ir.engine_api import DecodeStreamProtocol, StepOrder, Tokenizer
from .admission import Admission
from .engine_scheduler import BatchRecord
from .policies import PendingRequest, make_order, sequence_order
from .request_info import RequestInfo, make_request


@dataclass(eq=False)
class PooledSeq:
    """A sequence of instance ``instance`` (only used with more than one instance)."""

    instance: int
    seq: Any


class BatchedLLM:
    """``LLMProtocol`` over ``instances`` (same model and tokenizer).

    Args:
        name: engine name (trace rows: ``name`` or ``name#i`` per instance).
        instances: LLM engines (``LLMProtocol``).
        admissions: per instance, bounds its running decodes (KV cache) and admits waiting
            ones in policy order; None: no bound.
        policy: the batching policy, which orders each engine step: which sequences' prefill
            chunks and decodes go first under the step's token budget, and which are preempted
            last. ``fcfs`` leaves the engines' own arrival order.
        policy_options: the policy's options (``aging_ms_per_ms`` for ``critical_path``).
        on_batch: receives a :class:`BatchRecord` per finished prefill, decode and score.
        clock: the runtime's clock.
    """

    def __init__(
        self,
        name: str,
        instances: Sequence[Any],
        admissions: Sequence[Admission] | None = None,
        *,
        on_batch: Callable[[BatchRecord], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        policy: str = "fcfs",
        policy_options: Mapping[str, float] | None = None,
    ) -> None:
        if not instances:
            raise ValueError(f"LLM {name!r} needs at least one instance")
        if admissions is not None and len(admissions) != len(instances):
            raise ValueError(f"LLM {name!r}: one admission per instance")
        self.name = name
        self.instances = list(instances)
        self.admissions = list(admissions) if admissions is not None else None
        self.on_batch = on_batch
        self._clock = clock
        self._open = [0] * len(self.instances)
        self.in_flight = [0] * len(self.instances)  # prefills not yet computed, per instance
        self.rows = (
            [name] if len(instances) == 1 else [f"{name}#{i}" for i in range(len(instances))]
        )
        self._arrivals = itertools.count()
        self._ordered = policy != "fcfs"
        if self._ordered:
            self.set_step_order(
                sequence_order(make_order(policy, **dict(policy_options or {})), clock)
            )

    # -- what the runtime asks of every LLM --------------------------------------------------
    def set_step_order(self, order: StepOrder | None) -> None:
        for inst in self.instances:
            inst.set_step_order(order)

    def kv_usage(self) -> float:
        return max(inst.kv_usage() for inst in self.instances)

    @property
    def tokenizer(self) -> Tokenizer:
        """The first instance's (read when asked: a remote LLM's arrives when it starts)."""
        return self.instances[0].tokenizer

    @property
    def open_sequences(self) -> int:
        return sum(self._open)

    def _request(self, info: RequestInfo | None, tokens: int = 0) -> PendingRequest:
        """What an instance's step order reads of a call: its primitive's request, stamped
        with its arrival at this LLM (one count for prefills, decodes and scores)."""
        request = make_request(None, info, 1, tokens)
        request.enqueued_at = self._clock()
        request.seq = next(self._arrivals)
        return request

    def _record(self, i: int, request: PendingRequest, started: float, ok: bool) -> None:
        if self.on_batch is not None:
            self.on_batch(BatchRecord(self.rows[i], (request,), started, self._clock(), ok))

    # -- routing -----------------------------------------------------------------------------
    def _pick(self) -> int:
        if len(self.instances) == 1:
            return 0

        def load(i: int) -> tuple[float, int, int]:
            return (self.instances[i].kv_usage(), self._open[i], self.in_flight[i])

        return min(range(len(self.instances)), key=load)

    def _route(self, seq: Any) -> tuple[int, Any]:
        if isinstance(seq, PooledSeq):
            return seq.instance, seq.seq
        return 0, seq

    # -- the protocol ------------------------------------------------------------------------
    async def open(self) -> Any:
        i = self._pick()
        raw = await self.instances[i].open()
        self._open[i] += 1
        return raw if len(self.instances) == 1 else PooledSeq(i, raw)

    async def close(self, seq: Any) -> None:
        i, raw = self._route(seq)
        await self.instances[i].close(raw)
        self._open[i] = max(0, self._open[i] - 1)

    async def prefill(self, seq: Any, tokens: list[int], *, info: RequestInfo | None) -> None:
        i, raw = self._route(seq)
        request = self._request(info, len(tokens))
        self.in_flight[i] += 1
        ok = False
        try:
            await self.instances[i].prefill(raw, tokens, info=request)
            ok = True
        finally:
            self.in_flight[i] -= 1
            self._record(i, request, request.enqueued_at, ok)

    def prefill_when_idle(self, seq: Any, tokens: list[int], *, info: RequestInfo | None) -> None:
        """The instance computes ``tokens`` in its next idle step, or with the sequence's next
        prefill or decode (the engine's background prefill); traced as issued."""
        i, raw = self._route(seq)
        request = self._request(info, len(tokens))
        self.instances[i].prefill_when_idle(raw, tokens, info=request)
        self._record(i, request, request.enqueued_at, True)

    def decode(
        self, seq: Any, params: SamplingParams, *, info: RequestInfo | None
    ) -> DecodeStreamProtocol:
        i, raw = self._route(seq)
        admission = self.admissions[i] if self.admissions is not None else None
        return _Decode(self, i, raw, params, info, admission)

    async def score(
        self, seq: Any, candidates: list[str], *, info: RequestInfo | None
    ) -> list[float]:
        """The instance's ``score``, admitted and traced as a decode is (its candidates are
        prefilled on forks of the sequence, which take KV blocks)."""
        i, raw = self._route(seq)
        request = self._request(info)
        admission = self.admissions[i] if self.admissions is not None else None
        if admission is not None:
            await admission.acquire(request)
        started, ok = self._clock(), False
        try:
            scores = await self.instances[i].score(raw, candidates, info=request)
            ok = True
            return scores
        finally:
            if admission is not None:
                admission.release()
            request.tokens = len(candidates)
            self._record(i, request, started, ok)


class _Decode:
    """One decode through :class:`BatchedLLM`: admitted (KV room) before its first piece, its
    pieces sent to the query as they come, traced when it ends however it ends. Closing it
    early stops the instance's decode too."""

    __slots__ = (
        "_admission", "_done", "_i", "_info", "_llm", "_params", "_raw", "_request",
        "_started", "_stream", "end", "pieces",
    )  # fmt: skip

    def __init__(
        self,
        llm: BatchedLLM,
        i: int,
        raw: Any,
        params: SamplingParams,
        info: RequestInfo | None,
        admission: Admission | None,
    ) -> None:
        self._llm, self._i, self._raw, self._params, self._info = llm, i, raw, params, info
        self._admission = admission
        self._request = llm._request(info)
        self._stream: DecodeStreamProtocol | None = None
        self._started = 0.0
        self._done = False
        self.pieces = 0
        self.end: DecodeEnd | None = None

    def __aiter__(self) -> _Decode:
        return self

    async def __anext__(self) -> DecodePiece:
        stream = self._stream
        if stream is None:
            stream = await self._begin()
        try:
            piece = await stream.__anext__()
        except StopAsyncIteration:
            self.end = stream.end
            self._finish(True)
            raise
        except BaseException:
            self._finish(False)
            raise
        self.pieces += 1
        info = self._info
        if info is not None:
            info.query.decoded(info.facts.node_id, piece)
        return piece

    async def _begin(self) -> DecodeStreamProtocol:
        llm = self._llm
        if self._admission is not None:
            await self._admission.acquire(self._request)
        self._started = llm._clock()
        self._stream = llm.instances[self._i].decode(self._raw, self._params, info=self._request)
        return self._stream

    def _finish(self, ok: bool) -> None:
        if self._done:
            return
        self._done = True
        if self._admission is not None:
            self._admission.release()
            self._admission = None
        request = self._request
        request.tokens = self.pieces
        self._llm._record(self._i, request, self._started or request.enqueued_at, ok)

    async def aclose(self) -> None:
        """Stop the decode (a stop condition met, or the query cancelled)."""
        if self._stream is not None and not self._done:
            await self._stream.aclose()
            self._finish(True)
