"""The LLM proxy: one name over one or more LLM engine instances.

A sequence stays on the instance that opened it (its KV cache lives there); ``open`` picks the
instance with the least load (its own ``kv_usage()`` when it reports one, then open sequences,
then queued prefills). Prefills go through the instance's engine scheduler, so the batching
policy orders them when the engine is saturated; the engine batches running prefills and decode
steps itself (continuous batching). Decodes pass straight through, reported as trace records and,
piece by piece, to the query (for streamed answers).

A prompt's early part (a PartialPrefill) is prefilled only when it costs nothing: it is held
(:meth:`BatchedLLM.prefill_when_idle`) until its instance has no prefill queued or running and no
decode running, then computed in that idle gap; if the sequence's next prefill or its decode comes
first, the held tokens are computed together with it, in one request. So on a busy LLM the split
adds no engine step and reorders nothing, and on an idle one it fills time the LLM had to spare.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..ir.engine_api import DecodeParams
from .admission import Admission
from .engine_scheduler import BatchRecord, EngineScheduler
from .policies import PendingRequest, make_order, sequence_order
from .proxies import PrefillCall, Submitter, with_info
from .request_info import CURRENT, make_request

log = logging.getLogger(__name__)


@dataclass(eq=False)
class PooledSeq:
    """A sequence of instance ``instance`` (only used with more than one instance)."""

    instance: int
    seq: Any


IDLE_GRACE_S = 0.002  # how long an instance must stay idle before held prefills go in


@dataclass(eq=False)
class _Held:
    """Tokens of a sequence held for an idle gap: the request (built on behalf of the primitive
    that asked, for its trace row) and, once issued, its future."""

    instance: int
    raw: Any
    tokens: list[int]
    request: Any
    future: Awaitable[Any] | None = None


class BatchedLLM:
    """``LLM`` interface over ``instances`` (same model and tokenizer).

    Args:
        name: engine name (trace rows: ``name`` or ``name#i`` per instance).
        instances: LLM engines.
        schedulers: one prefill scheduler per instance, or None to call prefill directly.
        admissions: per instance, bounds its running decodes (KV cache) and admits waiting
            ones in policy order; None: no bound.
        policy: the batching policy, which also orders each engine step of the instances that
            take a step order (``set_step_order``, as ``LLMEngine``): which sequences' prefill
            chunks and decodes go first under the step's token budget, and which are preempted
            last. ``fcfs`` leaves the engines' own arrival order.
        policy_options: the policy's options (``aging_ms_per_ms`` for ``critical_path``).
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
        policy: str = "fcfs",
        policy_options: Mapping[str, float] | None = None,
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
        self.on_batch = on_batch
        self._clock = clock
        self._open = [0] * len(self.instances)
        # Busy: decodes running, prefills queued or running. A scheduler that reports its own
        # load and calls on_idle counts its prefills itself (no callback per request); for the
        # others (and with no scheduler) each prefill's future is watched.
        self._busy = [0] * len(self.instances)
        self._loads: list[EngineScheduler | None] = [None] * len(self.instances)
        for i, sched in enumerate(self.schedulers or ()):
            if isinstance(sched, EngineScheduler) and sched.on_idle is None:
                sched.on_idle = functools.partial(self._arm, i)
                self._loads[i] = sched
        self._armed = [False] * len(self.instances)  # an idle look-again is scheduled
        self._held: dict[Any, _Held] = {}  # _key(instance, sequence) -> held tokens, oldest first
        self._unissued: list[dict[Any, _Held]] = [{} for _ in self.instances]  # per instance
        self._rows = (
            [name] if len(instances) == 1 else [f"{name}#{i}" for i in range(len(instances))]
        )
        # Step order: the instances that take one get each call's request info.
        self._ordered = [False] * len(self.instances)
        self._arrivals = itertools.count()
        if policy != "fcfs":
            order = sequence_order(make_order(policy, **dict(policy_options or {})), clock)
            for i, inst in enumerate(self.instances):
                if callable(getattr(inst, "set_step_order", None)):
                    if not _takes_info(inst):  # e.g. a subclass overriding prefill without it
                        log.warning("LLM %s: %s has set_step_order but its prefill, decode or "
                                    "score takes no info=; its steps keep arrival order",
                                    self._rows[i], type(inst).__name__)  # fmt: skip
                        continue
                    inst.set_step_order(order)
                    self._ordered[i] = True

    def _info(self, i: int, request: Any) -> Any:
        """What instance ``i``'s step order reads of ``request`` (None if it takes none): a
        copy stamped with its arrival at this LLM, one count for prefills and decodes alike."""
        if not self._ordered[i]:
            return None
        r = request
        return PendingRequest(
            r.query_id,
            r.node_id,
            items=r.items,
            tokens=r.tokens,
            depth=r.depth,
            remaining_ms=r.remaining_ms,
            query_remaining_ms=r.query_remaining_ms,
            deadline=r.deadline,
            enqueued_at=self._clock(),
            seq=next(self._arrivals),
            op=r.op,
        )

    def _prefill_request(self, i: int, raw: Any, tokens: list[int]) -> Any:
        request = make_request(PrefillCall(raw, tokens), 1, len(tokens))
        request.payload.info = self._info(i, request)
        return request

    @property
    def tokenizer(self) -> Any:
        """The first instance's (read when asked: a remote LLM's arrives when it starts)."""
        return self.instances[0].tokenizer

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
        held = self._take(i, raw) if self._held else None
        if held is not None and held.future is not None:
            held.future.cancel()  # withdrawn if still queued
        await self.instances[i].close(raw)
        self._open[i] = max(0, self._open[i] - 1)

    def prefill(self, seq: Any, tokens: list[int]) -> Awaitable[None]:
        """Awaitable (the queued request's future, as in ``ayo.scheduler.batching.proxies``). Tokens held
        by :meth:`prefill_when_idle` and not yet issued go first, in the same request."""
        i, raw = self._route(seq)
        held = self._take(i, raw) if self._held else None
        if held is not None:
            if held.future is not None:  # already running: the rest follows it
                return self._after(held.future, i, raw, list(tokens))
            tokens = held.tokens + list(tokens)
        request = self._prefill_request(i, raw, list(tokens))
        if held is not None:  # the held primitive is traced and timed with this request
            request.folded = (held.request,)
        return self._issue(i, request)

    def prefill_when_idle(self, seq: Any, tokens: list[int]) -> None:
        """Hold ``tokens`` (the next ones of ``seq``) until the instance is idle, then prefill
        them; the sequence's next :meth:`prefill` or :meth:`decode` takes them along if that
        comes first. Returns at once; an error surfaces at that next call."""
        if not tokens:
            return
        i, raw = self._route(seq)
        key = _key(i, raw)
        if key in self._held:
            raise RuntimeError("prefill_when_idle twice on one sequence without a prefill between")
        tokens = list(tokens)
        request = self._prefill_request(i, raw, tokens)
        request.enqueued_at = self._clock()
        self._held[key] = self._unissued[i][key] = _Held(i, raw, tokens, request)
        self._arm(i)

    def _issue(self, i: int, request: Any) -> Awaitable[None]:
        if self.schedulers is None:
            p = request.payload
            future: Awaitable[Any] = asyncio.ensure_future(
                with_info(self.instances[i].prefill, p.info, p.seq, p.tokens)
            )
        else:
            future = self.schedulers[i].enqueue(request)
            if self._loads[i] is not None:  # counted by the scheduler's load
                return future
        self._busy[i] += 1
        future.add_done_callback(lambda _: self._idle_check(i))  # type: ignore[attr-defined]
        return future

    def _is_busy(self, i: int) -> bool:
        sched = self._loads[i]
        return bool(self._busy[i] or (sched is not None and sched.load))

    def _idle_check(self, i: int) -> None:
        self._busy[i] -= 1
        self._arm(i)

    def _arm(self, i: int) -> None:
        """If instance ``i`` looks idle with tokens held, look again in ``IDLE_GRACE_S``: the
        work that usually follows at once (a sequence's decode after its prefill, the next
        step of a chain, the other prefills of a query that just started) must not find the
        held prefills in its way."""
        if self._armed[i] or not self._unissued[i] or self._is_busy(i):
            return
        self._armed[i] = True
        asyncio.get_running_loop().call_later(IDLE_GRACE_S, self._issue_held, i)

    def _issue_held(self, i: int) -> None:
        """Issue every held prefill of instance ``i`` if it is idle (they batch together)."""
        self._armed[i] = False
        if not self._unissued[i] or self._is_busy(i):
            return
        waiting, self._unissued[i] = self._unissued[i], {}
        for held in waiting.values():
            held.future = self._issue(i, held.request)
            held.future.add_done_callback(_retrieve)  # type: ignore[attr-defined]

    def _take(self, i: int, raw: Any) -> _Held | None:
        """Remove and return the sequence's held tokens (issued or not)."""
        key = _key(i, raw)
        self._unissued[i].pop(key, None)
        return self._held.pop(key, None)

    async def _after(self, first: Awaitable[Any], i: int, raw: Any, tokens: list[int]) -> None:
        await first
        if tokens:
            await self._issue(i, self._prefill_request(i, raw, tokens))

    async def decode(self, seq: Any, params: DecodeParams) -> AsyncIterator[Any]:
        i, raw = self._route(seq)
        info, run = CURRENT.get(), _DecodeRun(self._clock())
        self._busy[i] += 1  # from the start: a decode waiting for KV room keeps the LLM busy too
        try:
            await self._admit(i, raw, run)
            # closed with this generator: a consumer that stops early ends the instance's too
            async with contextlib.aclosing(self._decode(i, raw, params, run)) as pieces:
                async for piece in pieces:
                    run.pieces += 1
                    if info is not None:
                        info.query.decoded(info.facts.node_id, piece)
                    yield piece
            run.ok = True
        finally:
            self._decoded(i, run)

    async def decode_text(self, seq: Any, params: DecodeParams) -> str:
        """:meth:`decode` joined into one string (the pieces still go to the query as they
        come): one coroutine instead of an async generator over another."""
        i, raw = self._route(seq)
        info, run = CURRENT.get(), _DecodeRun(self._clock())
        self._busy[i] += 1
        pieces: list[str] = []
        try:
            await self._admit(i, raw, run)
            async for piece in self._decode(i, raw, params, run):
                if info is not None:
                    info.query.decoded(info.facts.node_id, piece)
                pieces.append(piece if isinstance(piece, str) else piece.text)
            run.ok = True
        finally:
            run.pieces = len(pieces)
            self._decoded(i, run)
        return "".join(pieces)

    async def score(self, seq: Any, candidates: list[str]) -> list[float]:
        """The instance's ``score``, admitted and traced as a decode is (its candidates are
        prefilled on forks of the sequence, which take KV blocks)."""
        i, raw = self._route(seq)
        run = _DecodeRun(self._clock())
        self._busy[i] += 1
        try:
            await self._admit(i, raw, run)
            info = self._info(i, run.request)
            scores = await with_info(self.instances[i].score, info, raw, list(candidates))
            run.ok, run.pieces = True, len(candidates)
            return scores
        finally:
            self._decoded(i, run)

    def _decode(self, i: int, raw: Any, params: DecodeParams, run: _DecodeRun) -> Any:
        return with_info(self.instances[i].decode, self._info(i, run.request), raw, params)

    async def _admit(self, i: int, raw: Any, run: _DecodeRun) -> None:
        """Before a decode: the sequence's held tokens computed, then room in the KV cache."""
        held = self._take(i, raw) if self._held else None
        if held is not None:
            await (held.future if held.future is not None else self._issue(i, held.request))
        admission = self.admissions[i] if self.admissions is not None else None
        if admission is not None:
            await admission.acquire(run.request)
            run.admission = admission
        run.started = self._clock()

    def _decoded(self, i: int, run: _DecodeRun) -> None:
        """After a decode, however it ended: the KV room back, the trace row."""
        self._idle_check(i)
        if run.admission is not None:
            run.admission.release()
        if self.on_batch is not None:
            request = run.request
            request.tokens, request.enqueued_at = run.pieces, run.enqueued
            self.on_batch(
                BatchRecord(self._rows[i], (request,), run.started, self._clock(), run.ok)
            )


class _DecodeRun:
    """One decode's bookkeeping (admission held, pieces, times) for :class:`BatchedLLM`."""

    __slots__ = ("admission", "enqueued", "ok", "pieces", "request", "started")

    def __init__(self, now: float) -> None:
        self.request = make_request(None)  # for the KV admission, then the trace row
        self.enqueued = self.started = now
        self.admission: Admission | None = None
        self.pieces = 0
        self.ok = False


def _takes_info(inst: Any) -> bool:
    """Whether ``prefill``, ``decode`` and ``score`` of ``inst`` all accept ``info=``."""
    for name in ("prefill", "decode", "score"):
        try:
            params = inspect.signature(getattr(inst, name)).parameters
        except (AttributeError, TypeError, ValueError):
            return False
        if "info" not in params and not any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
        ):
            return False
    return True


def _key(instance: int, raw: Any) -> Any:
    """A sequence's key: the engine's handle itself (an int, a hashable object), else its id."""
    try:
        hash(raw)
    except TypeError:
        return instance, id(raw)
    return instance, raw


def _retrieve(future: Any) -> None:
    """Mark a held prefill's error as seen: a query that ends before it needs that prefill
    (cancelled, failed elsewhere) must not leave an unretrieved-exception warning."""
    if not future.cancelled():
        future.exception()
