"""The per-query graph scheduler: the reference executor plus what a serving runtime needs.

:class:`GraphRun` runs one query of a plan like :class:`QueryRun` (in-degree counters, dispatch
on readiness, stream edges, outputs by port, the first error naming its primitive, engine state
released however the query ends) and adds:

- policy inputs for the engine schedulers: each primitive's task carries a :class:`RequestInfo`
  (query, node, depth, remaining critical-path time from engine profiles, deadline);
- a deadline: when it passes, the query fails with :class:`DeadlineExceeded` naming the
  primitives still running; pending primitives are cancelled (withdrawn from engine queues) and
  LLM sequences and temporary collections are released; cancelling the caller does the same;
- streamed answers: pieces decoded by chosen nodes go to a callback as they are written;
- a callback per finished control primitive (Map, Condition, Aggregate) for traces.

And it is cheaper per primitive (the runtime's dispatch overhead):

- the first primitive the query inputs make ready runs in the caller's own task, and the first
  primitive a primitive's outputs make ready runs next in the same task, so a chain of
  primitives costs no task at all; an error elsewhere or the deadline interrupts the caller's
  primitive as it would a task's;
- other primitives made ready start eagerly, in place, and get a task only when they suspend
  (one that answers at once, e.g. a held prefill, costs none), their request info carried in
  the task's context;
- control primitives that cannot suspend run inline, their handler called directly;
- what each node needs (handler, ports, policy inputs, unpacked out edges, whether SKIPPED can
  reach it) is computed once per plan (:class:`PlanCosts`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .eager import resume
from .errors import ExecutionError
from .executor import QueryRun
from .graph import INPUT_ID, OUTPUT_ID, Edge, EdgeKind, Node, Plan
from .handlers import HANDLERS, Handler
from .ops import Op
from .ports import PortType
from .profile import EngineProfile, profile_for
from .request_info import CURRENT, RequestInfo
from .values import SKIPPED

log = logging.getLogger(__name__)

_DECODES = (Op.DECODE, Op.PARTIAL_DECODE)
_PREFILLS = (Op.PREFILL, Op.PARTIAL_PREFILL, Op.FULL_PREFILL)


class DeadlineExceeded(TimeoutError):
    """A query ran past its deadline; ``running`` names the primitives it was waiting for."""

    def __init__(self, query: str, deadline_ms: float, running: list[str]) -> None:
        self.running = running
        super().__init__(
            f"query {query} missed its deadline ({deadline_ms:.1f} ms); still running: "
            f"{', '.join(running) or 'nothing'}"
        )


def node_cost_ms(node: Node, profile: EngineProfile) -> float:
    """Estimated milliseconds of one primitive alone on its engine (0 for control ops).

    A decode costs ``max_tokens`` steps of one item; a prefill one item plus its prompt's tokens
    (template length / 4 plus ``placeholder_tokens`` per placeholder); others one item.
    """
    if not node.op.info.engine_kind:
        return 0.0
    latency = profile.latency
    if node.op in _DECODES:
        return node.config.get("max_tokens", 1) * latency.estimate_ms(1)
    if node.op in _PREFILLS and "prompt" in node.config:
        prompt = node.config["prompt"]
        tokens = len(prompt.template) // 4 + profile.placeholder_tokens * len(prompt.placeholders)
        return latency.estimate_ms(1, tokens)
    return latency.estimate_ms(1)


@dataclass(frozen=True)
class NodeFacts:
    """What running one node needs, computed once per plan: its policy inputs, and for a
    *plain* node (its handler's outputs emitted at once: no stream in, no micro-batches, not a
    PartialDecode or coalescing Aggregate) the handler and the data ports it reads.
    ``whole_inbox``: no edge into a control port, so its inbox is exactly its data inputs;
    ``may_skip``: a Condition upstream may send it SKIPPED."""

    depth: int
    remaining_ms: float
    op: str
    engine: bool
    handler: Handler | None
    ports: tuple[str, ...]
    whole_inbox: bool = False
    may_skip: bool = True


# An out edge: (edge, src_port, dst id, dst_port, streams?, dst node or None for the output),
# unpacked so the hot loop reads no attributes.
Route = tuple[Edge, str, str, str, bool, Node | None]


@dataclass(frozen=True)
class PlanCosts:
    """Per-node facts the batching policies read: ``depth`` (longest path to the output, in
    edges), ``cost_ms`` and ``remaining_ms`` (cost of the costliest path from the node to the
    output, the node included); and what :class:`GraphRun` needs per node (``inline``,
    ``facts``, ``routes``). Build it with :meth:`of`, once per plan."""

    depth: Mapping[str, int]
    cost_ms: Mapping[str, float]
    remaining_ms: Mapping[str, float]
    inline: frozenset[str] = frozenset()
    facts: Mapping[str, NodeFacts] = field(default_factory=dict)
    routes: Mapping[str, tuple[Route, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, plan: Plan, profiles: Mapping[str, EngineProfile]) -> PlanCosts:
        cost = {
            n.id: node_cost_ms(n, profile_for(profiles, n.engine, n.op.info.engine_kind))
            for n in plan.nodes
        }
        remaining: dict[str, float] = {}
        for nid in reversed(plan.topo_order):
            after = [remaining[e.dst] for e in plan.out_edges(nid) if e.dst in remaining]
            remaining[nid] = cost[nid] + max(after, default=0.0)
        may_skip: dict[str, bool] = {}
        for nid in plan.topo_order:
            may_skip[nid] = any(
                plan.node(e.src).op == Op.CONDITION or may_skip[e.src] for e in plan.in_edges(nid)
            )
        facts = {
            n.id: NodeFacts(
                plan.depth[n.id],
                remaining[n.id],
                n.op.value,
                bool(n.op.info.engine_kind),
                HANDLERS.get(n.op) if _plain(plan, n) else None,
                tuple(p.name for p in n.inputs if not p.control),
                not any(_to_control_port(plan, e) for e in plan.in_edges(n.id)),
                may_skip[n.id],
            )
            for n in plan.nodes
            if n.id not in (INPUT_ID, OUTPUT_ID)
        }
        inline = _inline_nodes(plan)
        routes = {
            n.id: tuple(
                (
                    e,
                    e.src_port,
                    e.dst,
                    e.dst_port,
                    e.kind == EdgeKind.STREAM,
                    None if e.dst == OUTPUT_ID else plan.node(e.dst),
                )
                for e in plan.out_edges(n.id)
            )
            for n in plan.nodes
        }
        return cls(plan.depth, cost, remaining, inline, facts, routes)


def _to_control_port(plan: Plan, edge: Edge) -> bool:
    port = plan.node(edge.dst).input(edge.dst_port)
    return port is None or port.control


def _plain(plan: Plan, node: Node) -> bool:
    """Whether the executor runs ``node`` as one handler call whose outputs are emitted (the
    last branch of ``QueryRun._execute``), unless an input was skipped."""
    return not (
        any(e.kind == EdgeKind.STREAM for e in plan.in_edges(node.id))
        or node.op == Op.PARTIAL_DECODE
        or (node.op == Op.AGGREGATE and node.config["mode"] == "coalesce")
        or "micro_batch" in node.config
    )


_INLINE_OPS = (Op.MAP, Op.CONDITION, Op.AGGREGATE)
_HOLDS_STATE = (PortType.SEQ, PortType.SEQ_LIST, PortType.ANY)


def _inline_nodes(plan: Plan) -> frozenset[str]:
    """Control primitives that never suspend (no stream in or out, no sequence to close when
    skipped): they run in the task that completes their last input, without a task of their own."""
    streams = {e.src for e in plan.edges if e.kind == EdgeKind.STREAM}
    streams |= {e.dst for e in plan.edges if e.kind == EdgeKind.STREAM}
    return frozenset(
        n.id
        for n in plan.nodes
        if n.op in _INLINE_OPS
        and n.id not in streams
        and not any(p.type in _HOLDS_STATE for p in n.inputs)
    )


class GraphRun(QueryRun):
    """One query of ``plan`` on ``engines`` (usually batching proxies), see the module doc.

    Args:
        query_id: the query's number (engine-scheduler buckets, traces).
        costs: :meth:`PlanCosts.of` the plan (computed once per plan by the caller).
        deadline: absolute time on ``clock`` by which the query must end, or None.
        stream_nodes: decode nodes whose pieces go to ``on_piece``.
        on_control: called with (node, start, end, ok) for each control primitive.
        clock: seconds; the event loop's clock unless told otherwise.
    """

    def __init__(
        self,
        plan: Plan,
        inputs: Mapping[str, Any],
        engines: Mapping[str, Any],
        *,
        query_id: int,
        costs: PlanCosts,
        deadline: float | None = None,
        stream_nodes: frozenset[str] = frozenset(),
        on_piece: Callable[[str], None] | None = None,
        on_control: Callable[[Node, float, float, bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(plan, inputs, engines, f"q{query_id}")
        self.number = query_id
        self.costs = costs
        self.deadline = deadline
        self._stream_nodes = stream_nodes
        self._on_piece = on_piece
        self._on_control = on_control
        self._clock = clock
        self._active: dict[str, float] = {}
        self._remaining: float | None = 0.0  # max of _active, None when it must be recomputed
        self._started = clock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._continuing = False  # inside a task's emit: the first node made ready runs there
        self._next: Node | None = None
        self._facts = costs.facts
        self._caller: asyncio.Task[Any] | None = None  # running a primitive in run()
        self._interrupted = False

    # -- QueryState ----------------------------------------------------------------------------
    def remaining_ms(self) -> float:
        if self._remaining is None:  # a primitive left: recompute (rare; usually 1-2 running)
            self._remaining = max(self._active.values(), default=0.0)
        return self._remaining

    def decoded(self, node_id: str, piece: Any) -> None:
        if self._on_piece is not None and node_id in self._stream_nodes:
            self._on_piece(piece if isinstance(piece, str) else piece.text)

    # -- running -------------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        """Execute; raises ``ExecutionError`` naming the failed primitive, or
        :class:`DeadlineExceeded`.

        The first primitive the query inputs make ready runs in the caller's task (no task of
        its own); the others start eagerly and get a task only if they suspend. An error
        elsewhere, or the deadline, interrupts the caller's primitive as it would a task."""
        if self._result is not None:
            raise RuntimeError("a QueryRun runs once; make a new one per query")
        self._loop = loop = asyncio.get_running_loop()
        self._result = result = loop.create_future()
        self._check_inputs()
        timer = None
        if self.deadline is not None:
            timer = loop.call_later(max(0.0, self.deadline - self._clock()), self._expire)
        outer = CURRENT.get()
        try:
            self._continuing, self._next = True, None
            try:
                self._begin()
            finally:
                first, self._continuing, self._next = self._next, False, None
            if first is not None and not result.done():
                self._caller = asyncio.current_task()
                try:
                    await self._run_node(first)
                except asyncio.CancelledError:
                    # Interrupted by _fail (the query already has its error): swallow that one
                    # cancellation, keep any other (the caller itself being cancelled).
                    caller = self._caller
                    if not self._interrupted or caller is None or caller.uncancel() > 0:
                        raise
                finally:
                    self._caller = None
            return await result
        finally:
            if timer is not None:
                timer.cancel()
            CURRENT.set(outer)
            await self._cleanup()

    def _fail(self, exc: BaseException) -> None:
        result = self._result
        if result is None or result.done():
            return
        result.set_exception(exc)
        caller = self._caller
        if caller is not None and caller is not asyncio.current_task() and not self._interrupted:
            self._interrupted = True  # the caller is running a primitive: stop it
            caller.cancel()

    def _expire(self) -> None:
        budget_ms = (self.deadline - self._started) * 1e3 if self.deadline else 0.0
        self._fail(DeadlineExceeded(self.ctx.query_id, budget_ms, sorted(self._active)))

    def _emit(self, node: Node, outputs: Mapping[str, Any]) -> None:
        # QueryRun._emit with QueryRun._deliver folded in, over the plan's precomputed routes.
        inbox, pending = self._inbox, self._pending
        for edge, src_port, dst_id, dst_port, stream, dst in self.costs.routes[node.id]:
            value = outputs[src_port]
            if stream:
                self._queues[edge].put_nowait(value)
                continue
            inbox[dst_id][dst_port] = value
            left = pending[dst_id] = pending[dst_id] - 1
            if left == 0:
                if dst is None:
                    self._outputs_ready = True
                    self._finish()
                else:
                    self._start(dst)

    def _start(self, node: Node) -> None:
        if node.id not in self.costs.inline:
            if self._continuing and self._next is None:
                self._next = node  # the task that made it ready runs it next (no new task)
            else:
                self._start_eagerly(node)
            return
        self._run_control(node)

    def _run_control(self, node: Node) -> None:
        """A control primitive that cannot suspend: run here, in the emitting primitive (a
        plain one by calling its handler directly, others through QueryRun._run_node)."""
        start = self._clock() if self._on_control is not None else 0.0
        facts = self._facts[node.id]
        data = self._data(node.id, facts) if facts.handler is not None else None
        if data is not None and facts.may_skip and any(v is SKIPPED for v in data.values()):
            data = None  # skipped: the executor's path sends SKIPPED on
        if data is not None:
            step = facts.handler(node, data, self.ctx)  # type: ignore[misc]
        else:
            step = QueryRun._run_node(self, node)  # emits, counts and reports failure itself
        try:
            step.send(None)
        except StopIteration as stop:
            if data is not None:
                self._emit(node, stop.value)
                self._running -= 1
                self._finish()
        except Exception as exc:  # only a handler raises here; the query gets the error
            self._node_failed(node, exc)
        else:  # an inline primitive awaited something: a bug in _inline_nodes
            step.close()
            raise RuntimeError(f"inline primitive {node.id!r} suspended")
        if self._on_control is not None:
            self._on_control(node, start, self._clock(), not self._failed(node))

    def _start_eagerly(self, node: Node) -> None:
        """Run ``node`` here and now up to its first suspension; only then does it get a task
        (one that answers at once, e.g. a held prefill, costs none). The emitting primitive's
        chaining state and request info are put back afterwards."""
        outer, continuing, following = CURRENT.get(), self._continuing, self._next
        self._continuing, self._next = False, None
        step = self._run_node(node)
        try:
            waited = step.send(None)
        except StopIteration:
            return
        else:  # suspended: go on in a task whose context holds this primitive's request info
            context = contextvars.copy_context()
            task = self._loop.create_task(resume(step, waited), context=context)  # type: ignore[union-attr]
            self._tasks.add(task)
        finally:
            CURRENT.set(outer)
            self._continuing, self._next = continuing, following

    async def _run_node(self, node: Node | None) -> None:
        """QueryRun._run_node, with QueryRun._execute's last branch inlined for plain nodes;
        then the first primitive that node's outputs made ready, in the same task."""
        info: RequestInfo | None = None
        result = self._result
        all_facts, active = self._facts, self._active
        while node is not None and not result.done():  # type: ignore[union-attr]
            facts = all_facts[node.id]
            if info is None:  # one per task; the nodes it runs one after another reuse it
                info = RequestInfo(
                    self.number, node.id, facts.op, facts.depth, facts.remaining_ms, self
                )
                CURRENT.set(info)
            else:
                info.node_id, info.op = node.id, facts.op
                info.depth, info.remaining_ms = facts.depth, facts.remaining_ms
            active[node.id] = facts.remaining_ms
            if self._remaining is not None and facts.remaining_ms > self._remaining:
                self._remaining = facts.remaining_ms
            control = not facts.engine and self._on_control is not None
            start = self._clock() if control else 0.0
            done, following = node, None
            try:
                handler = facts.handler
                if handler is not None:
                    data = self._data(node.id, facts)
                    if facts.may_skip:
                        for value in data.values():
                            if value is SKIPPED:
                                handler = None
                                break
                if handler is not None:
                    outputs = await handler(node, data, self.ctx)
                    self._continuing, self._next = True, None
                    try:
                        self._emit(node, outputs)
                    finally:
                        self._continuing, following = False, self._next
                        self._next = None
                else:
                    await self._execute(node)
                self._running -= 1
                self._finish()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._node_failed(node, exc)
            finally:
                if active.pop(done.id, None) == self._remaining:
                    self._remaining = None
                if control:
                    self._on_control(done, start, self._clock(), not self._failed(done))
            node = following

    def _data(self, node_id: str, facts: NodeFacts) -> dict[str, Any]:
        """The node's data inputs by port (its inbox itself when that holds nothing else)."""
        inbox = self._inbox[node_id]
        if facts.whole_inbox:
            return inbox
        return {name: inbox[name] for name in facts.ports if name in inbox}

    def _failed(self, node: Node) -> bool:
        res = self._result
        if res is None or not res.done() or res.cancelled():
            return False
        exc = res.exception()
        return isinstance(exc, ExecutionError) and exc.node == node.id


def answer_nodes(plan: Plan, port: str = "answer") -> frozenset[str]:
    """The decode nodes whose text is the plan's output ``port`` (the streamed answer)."""
    edge = plan.source(OUTPUT_ID, port)
    if edge is None or edge.src == INPUT_ID:
        return frozenset()
    node = plan.node(edge.src)
    return frozenset({node.id}) if node.op == Op.DECODE else frozenset()
