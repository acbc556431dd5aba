"""A minimal event-driven executor: runs one query of a plan on engines.

Per-query state (input values, in-degree counters, stream queues) lives in ``QueryRun``, never
in the shared plan. A node starts when its last value input arrives (its in-degree counter
reaches zero); stream inputs are asyncio queues of ``Chunk`` closed by ``EndOfStream``. Nothing
polls. This is the reference the real graph scheduler (issue 6) grows from.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from .errors import ExecutionError
from .graph import INPUT_ID, OUTPUT_ID, Edge, EdgeKind, Node, Plan
from .handlers import HANDLERS, QueryContext, partial_decode_items
from .ops import Op
from .values import SKIPPED, Chunk, EndOfStream, SeqHandle

logger = logging.getLogger(__name__)
_ids = itertools.count()


class QueryRun:
    """One execution of ``plan`` with ``inputs``; ``await run()`` returns the outputs by name.

    Outputs on a branch a Condition did not take are left out of the result.
    """

    def __init__(
        self, plan: Plan, inputs: Mapping[str, Any], engines: Mapping[str, Any], query_id: str = ""
    ) -> None:
        self.plan = plan
        self.ctx = QueryContext(query_id or f"q{next(_ids)}", engines)
        self._inputs = dict(inputs)
        shape = plan.run_shape
        self._inbox: dict[str, dict[str, Any]] = defaultdict(dict)  # node -> port -> value
        self._pending = dict(shape.pending)  # value inputs still to come, per node
        self._queues: dict[Edge, asyncio.Queue[Chunk | EndOfStream]] = (
            {e: asyncio.Queue() for e in shape.streams} if shape.streams else {}
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self._result: asyncio.Future[dict[str, Any]] | None = None
        self._running = len(plan.nodes) - 2  # every primitive runs (or is skipped) once
        self._outputs_ready = False

    async def run(self) -> dict[str, Any]:
        """Execute; raises ``ExecutionError`` naming the first primitive that failed."""
        if self._result is not None:
            raise RuntimeError("a QueryRun runs once; make a new one per query")
        self._result = asyncio.get_running_loop().create_future()
        self._check_inputs()
        try:
            self._begin()
            return await self._result
        finally:
            await self._cleanup()

    def _check_inputs(self) -> None:
        missing = [name for name in self.plan.run_shape.inputs if name not in self._inputs]
        if missing:
            raise ValueError(f"missing query inputs {missing} for plan {self.plan.name!r}")

    def _begin(self) -> None:
        """Start the primitives without inputs, then deliver the query inputs."""
        self._start_sources()
        inputs = self._inputs
        self._emit(self.plan.node(INPUT_ID), {k: inputs[k] for k in self.plan.run_shape.inputs})

    def _start_sources(self) -> None:
        """Start the primitives without inputs (and end a query whose outputs need none)."""
        for n in self.plan.run_shape.sources:
            self._start(n)
        if self._pending[OUTPUT_ID] == 0:
            self._outputs_ready = True
            self._finish()

    async def _cleanup(self) -> None:
        """However the query ended: cancel its primitives still running, release engine state."""
        running = [t for t in self._tasks if not t.done()]
        if running:
            for t in running:
                t.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        ctx = self.ctx
        if ctx.open_seqs or ctx.temp_collections:
            await ctx.release()

    def _start(self, node: Node) -> None:
        task = asyncio.get_running_loop().create_task(self._run_node(node))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _deliver(self, edge: Edge, value: Any) -> None:
        if edge.kind == EdgeKind.STREAM:
            self._queues[edge].put_nowait(value)
            return
        self._inbox[edge.dst][edge.dst_port] = value
        self._pending[edge.dst] -= 1
        if self._pending[edge.dst] == 0:
            if edge.dst == OUTPUT_ID:
                self._outputs_ready = True
                self._finish()
            else:
                self._start(self.plan.node(edge.dst))

    def _emit(self, node: Node, outputs: Mapping[str, Any]) -> None:
        for e in self.plan.out_edges(node.id):
            self._deliver(e, outputs[e.src_port])

    def _emit_stream(
        self, node: Node, message: Chunk | EndOfStream, port_values: Mapping[str, Any] | None = None
    ) -> None:
        for e in self.plan.out_edges(node.id):
            if isinstance(message, Chunk) and port_values is not None:
                self._deliver(e, Chunk(message.index, message.offset, port_values[e.src_port]))
            else:
                self._deliver(e, message)

    def _finish(self) -> None:
        """Resolve the query once its outputs are in and every primitive has finished, so work
        with effects outside the query (an Ingest into a named collection) is never cut short."""
        if not self._outputs_ready or self._running > 0:
            return
        values = self._inbox[OUTPUT_ID]
        if self._result is not None and not self._result.done():
            self._result.set_result({k: v for k, v in values.items() if v is not SKIPPED})

    async def _run_node(self, node: Node) -> None:
        try:
            await self._execute(node)
            self._running -= 1
            self._finish()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._node_failed(node, exc)

    def _node_failed(self, node: Node, exc: Exception) -> None:
        """``node`` raised: the query fails with an ExecutionError naming it (cause chained)."""
        logger.debug("query %s: node %s failed", self.ctx.query_id, node.id, exc_info=exc)
        self._fail(ExecutionError(node.id, node.op.value, exc))

    def _fail(self, exc: BaseException) -> None:
        """End the query with ``exc`` (the first error wins)."""
        if self._result is not None and not self._result.done():
            self._result.set_exception(exc)

    async def _execute(self, node: Node) -> None:
        inbox = self._inbox[node.id]
        data = {p.name: inbox[p.name] for p in node.inputs if not p.control and p.name in inbox}
        stream_in = next(
            (e for e in self.plan.in_edges(node.id) if e.kind == EdgeKind.STREAM), None
        )
        coalesce = node.op == Op.AGGREGATE and node.config["mode"] == "coalesce"
        if not coalesce and any(v is SKIPPED for v in data.values()):
            await self._skip(node, stream_in)
        elif stream_in is not None:
            await self._consume_stream(node, data, stream_in)
        elif node.op == Op.PARTIAL_DECODE:
            count = 0
            async for item in partial_decode_items(node, data, self.ctx):
                self._emit_stream(
                    node, Chunk(count, count, [item]), {p.name: [item] for p in node.outputs}
                )
                count += 1
            self._emit_stream(node, EndOfStream(count))
        elif "micro_batch" in node.config:
            await self._micro_batches(node, data)
        else:
            self._emit(node, await HANDLERS[node.op](node, data, self.ctx))

    async def _skip(self, node: Node, stream_in: Edge | None) -> None:
        for value in self._inbox[node.id].values():  # a sequence prefilled for a skipped branch
            for handle in value if isinstance(value, list) else [value]:
                if isinstance(handle, SeqHandle):
                    await self.ctx.close_seq(handle.engine, handle.seq)
        if stream_in is not None:  # drain so the producer's end is consumed
            while not isinstance(await self._queues[stream_in].get(), EndOfStream):
                pass
        if any(e.kind == EdgeKind.STREAM for e in self.plan.out_edges(node.id)):
            self._emit_stream(node, EndOfStream(0, skipped=True))
        else:
            self._emit(node, {p.name: SKIPPED for p in node.outputs})

    async def _micro_batches(self, node: Node, data: dict[str, Any]) -> None:
        size, port = node.config["micro_batch"], node.item_port
        items = list(data[port])
        index = 0
        for index, start in enumerate(range(0, max(len(items), 1), size)):
            chunk = Chunk(index, start, items[start : start + size])
            out = await HANDLERS[node.op](node, self._slice(node, data, chunk), self.ctx)
            self._emit_stream(node, chunk, out)
        self._emit_stream(node, EndOfStream(index + 1))

    def _slice(self, node: Node, data: dict[str, Any], chunk: Chunk) -> dict[str, Any]:
        sliced = dict(data)
        sliced[node.item_port] = chunk.items
        for p in node.inputs:
            if p.aligned and p.name in data:
                sliced[p.name] = data[p.name][chunk.offset : chunk.offset + len(chunk.items)]
        return sliced

    async def _consume_stream(self, node: Node, data: dict[str, Any], edge: Edge) -> None:
        queue = self._queues[edge]
        parts: list[Any] = []
        while True:
            message = await queue.get()
            if isinstance(message, EndOfStream):
                break
            if node.op == Op.AGGREGATE:
                parts.append(message.items)
                continue
            out = await HANDLERS[node.op](
                node, self._slice(node, {**data, edge.dst_port: None}, message), self.ctx
            )
            self._emit_stream(node, message, out)
        if node.op != Op.AGGREGATE:
            self._emit_stream(node, message)
        elif message.skipped:
            self._emit(node, {"value": SKIPPED})
        elif node.config["mode"] == "concat":
            self._emit(node, {"value": [x for part in parts for x in part]})
        else:  # "same": every chunk carried the same value (e.g. the collection written to)
            if not parts or any(p != parts[0] for p in parts):
                raise ValueError(f"stream gave {len(parts)} values, expected equal ones")
            self._emit(node, {"value": parts[0]})


async def execute(
    plan: Plan, inputs: Mapping[str, Any], engines: Mapping[str, Any]
) -> dict[str, Any]:
    """Run ``plan`` once on ``engines`` (by name) and return its outputs."""
    return await QueryRun(plan, inputs, engines).run()
