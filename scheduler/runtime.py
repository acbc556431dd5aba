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
  reach it) is computed once per plan (:class:`~.plan_costs.PlanCosts`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from .eager import resume
from .errors import ExecutionError
from .executor import QueryRun
from .graph import INPUT_ID, OUTPUT_ID, Node, Plan
from .ops import Op
from .plan_costs import NodeFacts, PlanCosts, Route
from .request_info import CURRENT, RequestInfo
from .values import SKIPPED

log = logging.getLogger(__name__)


class DeadlineExceeded(TimeoutError):
    """A query ran past its deadline; ``running`` names the primitives it was waiting for."""

    def __init__(self, query: str, deadline_ms: float, running: list[str]) -> None:
        self.running = running
        super().__init__(
            f"query {query} missed its deadline ({deadline_ms:.1f} ms); still running: "
            f"{', '.join(running) or 'nothing'}"
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
        self._active: dict[str, float] = {}  # running primitives: their remaining_ms
        self._started = clock() if deadline is not None else 0.0  # for the deadline message
        self._loop: asyncio.AbstractEventLoop | None = None
        self._facts = costs.facts
        self._caller: asyncio.Task[Any] | None = None  # running a primitive in run()
        self._interrupted = False

    # -- QueryState ----------------------------------------------------------------------------
    def remaining_ms(self) -> float:
        active = self._active  # usually one or two primitives: cheaper to scan when asked
        return max(active.values()) if active else 0.0

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
            first = self._begin_chained()
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
            ctx = self.ctx
            if self._tasks or ctx.open_seqs or ctx.temp_collections:
                await self._cleanup()

    def _begin_chained(self) -> NodeFacts | None:
        """QueryRun._begin, returning the first primitive the inputs made ready (not started:
        the caller runs it in its own task)."""
        self._start_sources()
        return self._route(self.costs.input_routes, self._inputs, True)

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
        # The executor's paths (streams, micro-batches, skips): start what becomes ready.
        self._route(self._facts[node.id].routes, outputs, False)

    def _start(self, node: Node) -> None:
        facts = self._facts[node.id]
        if facts.inline:
            self._run_control(facts, False)
        else:
            self._start_eagerly(facts)

    def _route(
        self, routes: tuple[Route, ...], outputs: Mapping[str, Any], chain: bool
    ) -> NodeFacts | None:
        """QueryRun._emit with QueryRun._deliver folded in, over precomputed routes. Primitives
        made ready start (inline control ones run here); with ``chain``, the first other one is
        returned instead, for the caller to run next in its own task."""
        inbox, pending, following = self._inbox, self._pending, None
        for src_port, dst, dst_id, dst_port, stream, only in routes:
            if only:  # its one value input: ready now
                inbox[dst_id] = {dst_port: outputs[src_port]}
            elif stream is not None:
                self._queues[stream].put_nowait(outputs[src_port])
                continue
            else:
                inbox[dst_id][dst_port] = outputs[src_port]
                left = pending[dst_id] - 1
                pending[dst_id] = left
                if left:
                    continue
            if dst is None:
                self._outputs_ready = True
                self._finish()
            elif dst.inline:
                chained = self._run_control(dst, chain and following is None)
                if chained is not None:
                    following = chained
            elif chain and following is None:
                following = dst
            else:
                self._start_eagerly(dst)
        return following

    def _run_control(self, facts: NodeFacts, chain: bool) -> NodeFacts | None:
        """A control primitive that cannot suspend: run here, in the emitting primitive (a
        plain one by calling its handler directly, others through QueryRun._run_node).
        Returns the primitive to chain, as :meth:`_route`."""
        node, on_control = facts.node, self._on_control
        start = self._clock() if on_control is not None else 0.0
        compute = facts.compute
        data = self._plain_inputs(facts) if compute is not None else None
        following, ok = None, True
        if data is not None:
            try:
                outputs = compute(node, data, self.ctx)  # type: ignore[misc]
            except Exception as exc:  # the query gets the error, naming this primitive
                self._node_failed(node, exc)
                ok = False
            else:
                following = self._route(facts.routes, outputs, chain)
                self._running -= 1
                if self._outputs_ready:
                    self._finish()
        else:
            step = QueryRun._run_node(self, node)  # emits, counts and reports failure itself
            try:
                step.send(None)
            except StopIteration:
                ok = not self._failed(node)
            else:  # an inline primitive awaited something: a bug in _inline_nodes
                step.close()
                raise RuntimeError(f"inline primitive {node.id!r} suspended")
        if on_control is not None:
            on_control(node, start, self._clock(), ok)
        return following

    def _start_eagerly(self, facts: NodeFacts) -> None:
        """Run ``facts``'s node here and now up to its first suspension; only then does it get
        a task (one that answers at once, e.g. a held prefill, costs none). The emitting
        primitive's request info is put back afterwards."""
        outer = CURRENT.get()
        step = self._run_node(facts)
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

    async def _run_node(self, facts: NodeFacts | None) -> None:  # type: ignore[override]
        """QueryRun._run_node, with QueryRun._execute's last branch inlined for plain nodes;
        then the first primitive that node's outputs made ready, in the same task."""
        info: RequestInfo | None = None
        result = self._result
        active, on_control, ctx = self._active, self._on_control, self.ctx
        while facts is not None and not result.done():  # type: ignore[union-attr]
            if info is None:  # one per task; the nodes it runs one after another reuse it
                info = RequestInfo(self.number, facts, self)
                CURRENT.set(info)
            else:
                info.facts = facts
            node, node_id = facts.node, facts.node_id
            active[node_id] = facts.remaining_ms
            control = on_control is not None and not facts.engine
            start = self._clock() if control else 0.0
            following = None
            try:
                handler = facts.handler
                data = self._plain_inputs(facts) if handler is not None else None
                if data is not None:
                    following = self._route(facts.routes, await handler(node, data, ctx), True)  # type: ignore[misc]
                else:
                    await self._execute(node)
                self._running -= 1
                if self._outputs_ready:
                    self._finish()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._node_failed(node, exc)
            finally:
                del active[node_id]
                if control:
                    on_control(node, start, self._clock(), not self._failed(node))  # type: ignore[misc]
            facts = following

    def _plain_inputs(self, facts: NodeFacts) -> dict[str, Any] | None:
        """A plain node's data inputs by port (its inbox itself when that holds nothing else),
        or None when one is SKIPPED (the executor's path then sends SKIPPED on)."""
        inbox = self._inbox[facts.node_id]
        data = inbox if facts.whole_inbox else {n: inbox[n] for n in facts.ports if n in inbox}
        if facts.may_skip:
            for value in data.values():
                if value is SKIPPED:
                    return None
        return data

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
