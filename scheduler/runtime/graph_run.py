"""The graph scheduler: runs one query of a plan on engines, each primitive as soon as its
inputs are in.

Per-query state (input values, in-degree counters, stream queues) lives in :class:`GraphRun`,
never in the shared plan. How a query runs:

1. The primitives without inputs start, then the query inputs are delivered.
2. Delivering a value to a node counts down its in-degree; at zero the node is *ready*.
3. A ready control primitive that cannot wait on anything (Map, Condition, Aggregate of two
   values) runs at once, in place; any other primitive runs in an asyncio task of its own.
4. A primitive's outputs are delivered along its out edges (back to 2). Stream edges carry
   ``Chunk``s into an asyncio queue, closed by ``EndOfStream``; their consumer runs per chunk.
5. The query ends when its outputs are in and every primitive has finished, or at the first
   error (an :class:`ExecutionError` naming the primitive), or at the deadline
   (:class:`DeadlineExceeded`). However it ends, primitives still running are cancelled (which
   withdraws them from engine queues) and LLM sequences and temporary collections are released.

What the engine schedulers read: each primitive gets a :class:`RequestInfo` (query, node, depth,
remaining critical-path time from engine profiles, deadline), which its handler passes with
every engine call; batching proxies turn those calls into policy-ordered requests.
Streamed answers: pieces decoded by chosen nodes go to a callback as they are written.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..batching.request_info import RequestInfo
from ..ir.configs import micro_batch
from ..ir.errors import ExecutionError
from ..ir.graph import INPUT_ID, OUTPUT_ID, Edge, EdgeKind, Node, Plan
from ..ir.ops import Op
from ..ir.values import SKIPPED, Chunk, EndOfStream, SeqHandle
from .handlers import HANDLERS, QueryContext, partial_decode_items
from .plan_costs import NodeFacts, PlanCosts

log = logging.getLogger(__name__)
_numbers = itertools.count(1)


class DeadlineExceeded(TimeoutError):
    """A query ran past its deadline; ``running`` names the primitives it was waiting for."""

    def __init__(self, query: str, deadline_ms: float, running: list[str]) -> None:
        self.running = running
        super().__init__(
            f"query {query} missed its deadline ({deadline_ms:.1f} ms); still running: "
            f"{', '.join(running) or 'nothing'}"
        )


class GraphRun:
    """One execution of ``plan`` with ``inputs`` on ``engines`` (by name: the engines
    themselves, or the runtime's batching proxies); ``await run()`` returns the outputs by
    name. Outputs on a branch a Condition did not take are left out.

    Args:
        query_id: the query's number (engine-scheduler buckets, traces); a fresh one if None.
        costs: :meth:`PlanCosts.of` the plan (compute it once per plan and pass it); the
            default profiles' estimates if None.
        deadline: absolute time on ``clock`` by which the query must end, or None.
        stream_nodes: decode nodes whose pieces go to ``on_piece`` (each has ``.text``; an LLM
            engine's are ``DecodePiece``s, with ``.logprobs`` where the decode asked).
        on_control: called with (node, start, end, ok) for each control primitive (traces).
        on_span: called with (node id, where, start, end, ok) for work a primitive does off
            the engines (an agent's tool calls, ``where`` = ``"tool"``).
        clock: seconds; ``time.monotonic`` unless told otherwise.
    """

    def __init__(
        self,
        plan: Plan,
        inputs: Mapping[str, Any],
        engines: Mapping[str, Any],
        *,
        query_id: int | None = None,
        costs: PlanCosts | None = None,
        deadline: float | None = None,
        stream_nodes: frozenset[str] = frozenset(),
        on_piece: Callable[[Any], None] | None = None,
        on_control: Callable[[Node, float, float, bool], None] | None = None,
        on_span: Callable[[str, str, float, float, bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan = plan
        self.number = next(_numbers) if query_id is None else query_id
        self.ctx = QueryContext(f"q{self.number}", engines, on_span)
        self.costs = costs if costs is not None else PlanCosts.of(plan, {})
        self.deadline = deadline
        self._inputs = dict(inputs)
        self._stream_nodes = stream_nodes
        self._on_piece = on_piece
        self._on_control = on_control
        self._clock = clock
        shape = plan.run_shape
        self._inbox: dict[str, dict[str, Any]] = {n.id: {} for n in plan.nodes}  # port -> value
        self._pending = dict(shape.pending)  # value inputs still to come, per node
        self._queues: dict[Edge, asyncio.Queue[Chunk | EndOfStream]] = {
            e: asyncio.Queue() for e in shape.streams
        }
        self._tasks: set[asyncio.Task[None]] = set()
        self._active: dict[str, float] = {}  # running primitives: their remaining_ms
        self._unfinished = len(plan.nodes) - 2  # every primitive runs (or is skipped) once
        self._outputs_ready = False
        self._result: asyncio.Future[dict[str, Any]] | None = None

    # -- what engine calls read of their query (request_info.QueryState) ------------------------
    def remaining_ms(self) -> float:
        """The query's remaining critical-path time: the most of its running primitives'."""
        return max(self._active.values(), default=0.0)

    def decoded(self, node_id: str, piece: Any) -> None:
        """A piece (``.text``, and ``.logprobs`` where the decode asked) a decode wrote."""
        if self._on_piece is not None and node_id in self._stream_nodes:
            self._on_piece(piece)

    # -- the query ----------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        """Execute; raises :class:`ExecutionError` naming the primitive that failed first, or
        :class:`DeadlineExceeded`."""
        if self._result is not None:
            raise RuntimeError("a GraphRun runs once; make a new one per query")
        missing = [n for n in self.plan.run_shape.inputs if n not in self._inputs]
        if missing:
            raise ValueError(f"missing query inputs {missing} for plan {self.plan.name!r}")
        loop = asyncio.get_running_loop()
        self._result = loop.create_future()
        timer = None
        if self.deadline is not None:
            started = self._clock()
            timer = loop.call_later(max(0.0, self.deadline - started), self._expire, started)
        try:
            for node in self.plan.run_shape.sources:
                self._ready(node.id)
            self._outputs_ready = self._pending[OUTPUT_ID] == 0  # a plan with no outputs
            inputs = {k: self._inputs[k] for k in self.plan.run_shape.inputs}
            self._deliver_outputs(INPUT_ID, inputs)
            self._check_done()
            return await self._result
        finally:
            if timer is not None:
                timer.cancel()
            await self._cleanup()

    def _deliver_outputs(self, node_id: str, outputs: Mapping[str, Any]) -> None:
        """Each out edge of ``node_id`` gets its port's value."""
        for edge in self.plan.out_edges(node_id):
            self._deliver(edge, outputs[edge.src_port])

    def _deliver(self, edge: Edge, value: Any) -> None:
        if edge.kind == EdgeKind.STREAM:
            self._queues[edge].put_nowait(value)
            return
        self._inbox[edge.dst][edge.dst_port] = value
        self._pending[edge.dst] -= 1
        if self._pending[edge.dst] == 0:
            self._ready(edge.dst)

    def _ready(self, node_id: str) -> None:
        """All of ``node_id``'s value inputs are in: run it (in place or in a task), unless
        the query has already ended (failed or past its deadline)."""
        if self._result.done():  # type: ignore[union-attr]
            return
        if node_id == OUTPUT_ID:
            self._outputs_ready = True
            self._check_done()
            return
        facts = self.costs.facts[node_id]
        if facts.inline:
            self._run_inline(facts)
        else:
            task = asyncio.get_running_loop().create_task(self._run_in_task(facts))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _run_inline(self, facts: NodeFacts) -> None:
        """A control primitive that cannot wait on anything: its handler, called here."""
        node = facts.node
        start = self._clock() if self._on_control is not None else 0.0
        try:
            data = self._data(facts)
            if _skipped(facts, data):
                outputs = {p.name: SKIPPED for p in node.outputs}
            else:
                outputs = facts.compute(node, data, self.ctx)  # type: ignore[misc]
        except Exception as exc:
            self._node_failed(node, exc)
            ok = False
        else:
            self._unfinished -= 1  # before delivering: the output may be what was waited for
            self._deliver_outputs(node.id, outputs)
            self._check_done()
            ok = True
        if self._on_control is not None:
            self._on_control(node, start, self._clock(), ok)

    async def _run_in_task(self, facts: NodeFacts) -> None:
        """A primitive in its own task; its request info goes with its engine calls."""
        node = facts.node
        self._active[node.id] = facts.remaining_ms
        timed = self._on_control is not None and not facts.engine
        start = self._clock() if timed else 0.0
        ok = False
        try:
            await self._execute(facts, RequestInfo(self.number, facts, self))
            ok = True
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._node_failed(node, exc)
        finally:
            del self._active[node.id]
            if timed:
                self._on_control(node, start, self._clock(), ok)  # type: ignore[misc]
        self._unfinished -= 1
        self._check_done()

    # -- what a primitive does ------------------------------------------------------------------
    async def _execute(self, facts: NodeFacts, info: RequestInfo) -> None:
        node = facts.node
        data = self._data(facts)
        stream_in = facts.stream_in
        if _skipped(facts, data):
            await self._skip(facts)
        elif stream_in is not None:
            await self._consume_stream(node, data, stream_in, info)
        elif node.op == Op.PARTIAL_DECODE:
            count = 0
            async for item in partial_decode_items(node, data, self.ctx, info):
                self._emit_chunk(
                    node, Chunk(count, count, [item]), {p.name: [item] for p in node.outputs}
                )
                count += 1
            self._emit_chunk(node, EndOfStream(count))
        elif micro_batch(node.config):
            await self._micro_batches(node, data, info)
        else:
            self._deliver_outputs(node.id, await HANDLERS[node.op](node, data, self.ctx, info))

    def _data(self, facts: NodeFacts) -> dict[str, Any]:
        """The node's data inputs by port (control ports only order it)."""
        inbox = self._inbox[facts.node_id]
        return {name: inbox[name] for name in facts.ports if name in inbox}

    async def _skip(self, facts: NodeFacts) -> None:
        """An input is SKIPPED (a branch a Condition did not take): pass SKIPPED on, closing
        any sequence prefilled for this branch."""
        node = facts.node
        for value in self._inbox[node.id].values():
            for handle in value if isinstance(value, list) else [value]:
                if isinstance(handle, SeqHandle):
                    await self.ctx.close_seq(handle.engine, handle.seq)
        if facts.stream_in is not None:  # drain, so the producer's end is consumed
            while not isinstance(await self._queues[facts.stream_in].get(), EndOfStream):
                pass
        if facts.streams_out:
            self._emit_chunk(node, EndOfStream(0, skipped=True))
        else:
            self._deliver_outputs(node.id, {p.name: SKIPPED for p in node.outputs})

    def _emit_chunk(
        self, node: Node, message: Chunk | EndOfStream, values: Mapping[str, Any] | None = None
    ) -> None:
        """One chunk (with each out port's part of ``values``) or the end, down every out edge."""
        for edge in self.plan.out_edges(node.id):
            if isinstance(message, Chunk) and values is not None:
                self._deliver(edge, Chunk(message.index, message.offset, values[edge.src_port]))
            else:
                self._deliver(edge, message)

    async def _micro_batches(self, node: Node, data: dict[str, Any], info: RequestInfo) -> None:
        """The item port's list in chunks of ``micro_batch`` items, each sent on as it is done."""
        size, port = micro_batch(node.config), node.item_port
        items = list(data[port])
        index = 0
        for index, start in enumerate(range(0, max(len(items), 1), size)):
            chunk = Chunk(index, start, items[start : start + size])
            out = await HANDLERS[node.op](node, self._slice(node, data, chunk), self.ctx, info)
            self._emit_chunk(node, chunk, out)
        self._emit_chunk(node, EndOfStream(index + 1))

    def _slice(self, node: Node, data: dict[str, Any], chunk: Chunk) -> dict[str, Any]:
        """``data`` with the item port (and the ports aligned with it) cut to ``chunk``."""
        sliced = dict(data)
        sliced[node.item_port] = chunk.items
        for p in node.inputs:
            if p.aligned and p.name in data:
                sliced[p.name] = data[p.name][chunk.offset : chunk.offset + len(chunk.items)]
        return sliced

    async def _consume_stream(
        self, node: Node, data: dict[str, Any], edge: Edge, info: RequestInfo
    ) -> None:
        """The handler once per chunk coming down ``edge`` (an Aggregate gathers them). Chunks
        that queued up while the handler ran go into its next call together: one engine call
        (one fixed cost) for what arrived meanwhile, instead of one call each."""
        queue = self._queues[edge]
        parts: list[Any] = []
        handler = HANDLERS[node.op]
        waiting: list[Chunk | EndOfStream] = []
        emitted = 0
        while not isinstance(message := waiting.pop(0) if waiting else await queue.get(),
                             EndOfStream):  # fmt: skip
            if node.op == Op.AGGREGATE:
                parts.append(message.items)
                continue
            while not waiting and not queue.empty():
                after = queue.get_nowait()
                if not _follows(message, after):
                    waiting.append(after)
                    break
                message = Chunk(message.index, message.offset, message.items + after.items)
            chunk_data = self._slice(node, {**data, edge.dst_port: None}, message)
            out = await handler(node, chunk_data, self.ctx, info)
            self._emit_chunk(node, Chunk(emitted, message.offset, message.items), out)
            emitted += 1
        if node.op != Op.AGGREGATE:
            self._emit_chunk(node, EndOfStream(emitted, message.skipped))
        elif message.skipped:
            self._deliver_outputs(node.id, {"value": SKIPPED})
        elif node.config.mode == "concat":
            self._deliver_outputs(node.id, {"value": [x for part in parts for x in part]})
        else:  # "same": every chunk carried the same value (e.g. the collection written to)
            if not parts or any(p != parts[0] for p in parts):
                raise ValueError(f"stream gave {len(parts)} values, expected equal ones")
            self._deliver_outputs(node.id, {"value": parts[0]})

    # -- how the query ends -------------------------------------------------------------------
    def _check_done(self) -> None:
        """Resolve the query once its outputs are in and every primitive has finished, so work
        with effects outside the query (an Ingest into a named collection) is never cut short."""
        if self._outputs_ready and self._unfinished == 0 and not self._result.done():  # type: ignore[union-attr]
            values = self._inbox[OUTPUT_ID]
            self._result.set_result({k: v for k, v in values.items() if v is not SKIPPED})  # type: ignore[union-attr]

    def _node_failed(self, node: Node, exc: Exception) -> None:
        """``node`` raised: the query fails with an ExecutionError naming it (cause chained)."""
        log.debug("query %s: node %s failed", self.ctx.query_id, node.id, exc_info=exc)
        self._fail(ExecutionError(node.id, node.op.value, exc))

    def _fail(self, exc: BaseException) -> None:
        """End the query with ``exc`` (the first error wins)."""
        if self._result is not None and not self._result.done():
            self._result.set_exception(exc)

    def _expire(self, started: float) -> None:
        budget_ms = (self.deadline - started) * 1e3  # type: ignore[operator]
        self._fail(DeadlineExceeded(self.ctx.query_id, budget_ms, sorted(self._active)))

    async def _cleanup(self) -> None:
        """However the query ended: cancel its primitives still running, release engine state."""
        running = [t for t in self._tasks if not t.done()]
        for t in running:
            t.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        if self.ctx.open_seqs or self.ctx.temp_collections:
            await self.ctx.release()


def _follows(chunk: Chunk, after: Chunk | EndOfStream) -> bool:
    """Whether ``after`` continues ``chunk``'s list right where it ends (so one call can take
    both: the ports aligned with the items are sliced by offset)."""
    return (
        isinstance(after, Chunk)
        and isinstance(chunk.items, list)
        and isinstance(after.items, list)
        and after.offset == chunk.offset + len(chunk.items)
    )


def _skipped(facts: NodeFacts, data: Mapping[str, Any]) -> bool:
    """An input is SKIPPED (a branch not taken) and the node does not pick between inputs."""
    return not facts.coalesce and any(v is SKIPPED for v in data.values())


async def execute(
    plan: Plan, inputs: Mapping[str, Any], engines: Mapping[str, Any]
) -> dict[str, Any]:
    """Run ``plan`` once on ``engines`` (by name) and return its outputs."""
    return await GraphRun(plan, inputs, engines).run()


def answer_nodes(plan: Plan, port: str = "answer") -> frozenset[str]:
    """The decode (or generate) nodes whose text is the plan's output ``port`` (the streamed
    answer)."""
    edge = plan.source(OUTPUT_ID, port)
    if edge is None or edge.src == INPUT_ID:
        return frozenset()
    node = plan.node(edge.src)
    return frozenset({node.id}) if node.op in (Op.DECODE, Op.GENERATE, Op.AGENT) else frozenset()
