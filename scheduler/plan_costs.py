"""What running a plan needs, computed once per plan: per-node policy inputs (depth, cost and
remaining critical-path time from engine profiles) and what the graph scheduler reads per node
(:class:`NodeFacts`: handler, ports, unpacked out routes, whether it runs inline).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .graph import INPUT_ID, OUTPUT_ID, Edge, EdgeKind, Node, Plan
from .handlers import CONTROL_HANDLERS, HANDLERS, Handler
from .ops import Op
from .ports import PortType
from .profile import EngineProfile, profile_for

_DECODES = (Op.DECODE, Op.PARTIAL_DECODE)
_PREFILLS = (Op.PREFILL, Op.PARTIAL_PREFILL, Op.FULL_PREFILL)


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


class NodeFacts:
    """What running one node needs, computed once per plan (:meth:`PlanCosts.of`).

    Policy inputs: ``node_id``, ``op`` (its name), ``depth``, ``remaining_ms``. ``engine``: it
    calls an engine. ``handler`` and ``ports``: for a *plain* node (its handler's outputs
    emitted at once: no stream in, no micro-batches, not a PartialDecode or coalescing
    Aggregate), the handler and the data ports it reads (else None). ``whole_inbox``: no edge
    into a control port, so its inbox is exactly its data inputs; ``may_skip``: a Condition
    upstream may send it SKIPPED; ``inline``: a control primitive that never suspends, and
    ``compute`` its handler as a plain function when it is also plain.
    ``routes``: its out edges unpacked, (src port, destination facts or None for the output,
    destination id, destination port, the edge when it streams else None, whether it is the
    destination's only value input), so the hot loop reads no edge attributes.
    """

    __slots__ = (
        "compute", "depth", "engine", "handler", "inline", "may_skip", "node", "node_id", "op",
        "ports", "remaining_ms", "routes", "whole_inbox",
    )  # fmt: skip

    def __init__(
        self,
        node: Node,
        depth: int,
        remaining_ms: float,
        handler: Handler | None,
        *,
        whole_inbox: bool = False,
        may_skip: bool = True,
        inline: bool = False,
    ) -> None:
        self.node = node
        self.node_id = node.id
        self.op = node.op.value
        self.depth = depth
        self.remaining_ms = remaining_ms
        self.engine = bool(node.op.info.engine_kind)
        self.handler = handler
        self.ports = tuple(p.name for p in node.inputs if not p.control)
        self.whole_inbox = whole_inbox
        self.may_skip = may_skip
        self.inline = inline
        # an inline plain node's handler as a plain function (no coroutine to drive)
        self.compute = CONTROL_HANDLERS.get(node.op) if inline and handler is not None else None
        self.routes: tuple[Route, ...] = ()

    def __repr__(self) -> str:
        return f"NodeFacts({self.node_id!r}, depth={self.depth}, remaining_ms={self.remaining_ms})"


# An out edge: (src_port, dst facts or None for the output, dst id, dst_port, the edge if it
# streams else None, whether it is the destination's only value input).
Route = tuple[str, "NodeFacts | None", str, str, "Edge | None", bool]


@dataclass(frozen=True)
class PlanCosts:
    """Per-node facts the batching policies read: ``depth`` (longest path to the output, in
    edges), ``cost_ms`` and ``remaining_ms`` (cost of the costliest path from the node to the
    output, the node included); and what :class:`GraphRun` needs per node (``facts``, with the
    input node's routes in ``input_routes``). Build it with :meth:`of`, once per plan."""

    depth: Mapping[str, int]
    cost_ms: Mapping[str, float]
    remaining_ms: Mapping[str, float]
    facts: Mapping[str, NodeFacts] = field(default_factory=dict)
    input_routes: tuple[Route, ...] = ()

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
        inline = _inline_nodes(plan)
        facts = {
            n.id: NodeFacts(
                n,
                plan.depth[n.id],
                remaining[n.id],
                HANDLERS.get(n.op) if _plain(plan, n) else None,
                whole_inbox=not any(_to_control_port(plan, e) for e in plan.in_edges(n.id)),
                may_skip=may_skip[n.id],
                inline=n.id in inline,
            )
            for n in plan.nodes
            if n.id not in (INPUT_ID, OUTPUT_ID)
        }

        pending = plan.run_shape.pending

        def routes(nid: str) -> tuple[Route, ...]:
            return tuple(
                (
                    e.src_port,
                    facts.get(e.dst),
                    e.dst,
                    e.dst_port,
                    e if e.kind == EdgeKind.STREAM else None,
                    e.kind == EdgeKind.VALUE and pending[e.dst] == 1,
                )
                for e in plan.out_edges(nid)
            )

        for nid, f in facts.items():
            f.routes = routes(nid)
        return cls(plan.depth, cost, remaining, facts, routes(INPUT_ID))


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
