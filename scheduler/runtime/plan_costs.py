"""What running a plan needs, computed once per plan: per-node policy inputs (depth, cost and
remaining critical-path time from engine profiles) and what the graph scheduler reads per node
(:class:`NodeFacts`: ports, streams, whether it runs inline).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..ir.configs import AgentConfig, AggregateConfig, DecodeConfig
from ..ir.graph import INPUT_ID, OUTPUT_ID, EdgeKind, Node, Plan
from ..ir.ops import Op
from ..ir.ports import PortType
from ..profiles.profile import EngineProfile, profile_for
from .handlers import CONTROL_HANDLERS


def node_cost_ms(node: Node, profile: EngineProfile, items: int = 1) -> float:
    """Estimated milliseconds of one primitive alone on its engine (0 for control ops).

    A decode costs ``max_tokens`` steps of one item (an agent, its steps' worth); a prefill one item plus its prompt's tokens
    (template length / 4 plus ``placeholder_tokens`` per placeholder); others ``items`` items.
    """
    if not node.op.info.engine_kind:
        return 0.0
    latency = profile.latency
    cfg = node.config
    if isinstance(cfg, DecodeConfig):
        return cfg.params.max_tokens * latency.estimate_ms(1)
    if isinstance(cfg, AgentConfig):  # at most: every step decodes its whole budget
        return cfg.max_steps * cfg.max_tokens * latency.estimate_ms(1)
    prompt = cfg.prompt_or_none
    if prompt is not None:
        tokens = len(prompt.template) // 4 + profile.placeholder_tokens * len(prompt.placeholders)
        return latency.estimate_ms(1, tokens)
    return latency.estimate_ms(items)


class NodeFacts:
    """What running one node needs, computed once per plan (:meth:`PlanCosts.of`).

    Policy inputs: ``node_id``, ``op`` (its name), ``depth``, ``remaining_ms``. ``engine``: it
    calls an engine. ``ports``: the data ports it reads (control ports only order it).
    ``stream_in``: the stream edge into it, or None; ``streams_out``: it sends a stream.
    ``coalesce``: an Aggregate that takes whichever input was not SKIPPED. ``inline``: a control
    primitive that never waits (no stream, no sequence to close when skipped), run in place
    by ``compute``, its handler as a plain function.
    """

    __slots__ = (
        "coalesce", "compute", "depth", "engine", "inline", "node", "node_id", "op", "ports",
        "remaining_ms", "stream_in", "streams_out",
    )  # fmt: skip

    def __init__(self, plan: Plan, node: Node, depth: int, remaining_ms: float, inline: bool):
        self.node = node
        self.node_id = node.id
        self.op = node.op.value
        self.depth = depth
        self.remaining_ms = remaining_ms
        self.engine = bool(node.op.info.engine_kind)
        self.ports = tuple(p.name for p in node.inputs if not p.control)
        self.stream_in = next(
            (e for e in plan.in_edges(node.id) if e.kind == EdgeKind.STREAM), None
        )
        self.streams_out = any(e.kind == EdgeKind.STREAM for e in plan.out_edges(node.id))
        cfg = node.config
        self.coalesce = isinstance(cfg, AggregateConfig) and cfg.mode == "coalesce"
        self.inline = inline
        self.compute = CONTROL_HANDLERS[node.op] if inline else None

    def __repr__(self) -> str:
        return f"NodeFacts({self.node_id!r}, depth={self.depth}, remaining_ms={self.remaining_ms})"


@dataclass(frozen=True)
class PlanCosts:
    """Per-node facts the batching policies read: ``depth`` (longest path to the output, in
    edges), ``cost_ms`` and ``remaining_ms`` (cost of the costliest path from the node to the
    output, the node included); and what :class:`~.runtime.GraphRun` needs per node
    (``facts``). Build it with :meth:`of`, once per plan."""

    depth: Mapping[str, int]
    cost_ms: Mapping[str, float]
    remaining_ms: Mapping[str, float]
    facts: Mapping[str, NodeFacts] = field(default_factory=dict)

    @classmethod
    def of(cls, plan: Plan, profiles: Mapping[str, EngineProfile]) -> PlanCosts:
        cost = {
            n.id: node_cost_ms(
                n, profile_for(profiles, n.engine, n.op.info.engine_kind, n.op.value)
            )
            for n in plan.nodes
        }
        remaining: dict[str, float] = {}
        for nid in reversed(plan.topo_order):
            after = [remaining[e.dst] for e in plan.out_edges(nid) if e.dst in remaining]
            remaining[nid] = cost[nid] + max(after, default=0.0)
        inline = _inline_nodes(plan)
        facts = {
            n.id: NodeFacts(plan, n, plan.depth[n.id], remaining[n.id], n.id in inline)
            for n in plan.nodes
            if n.id not in (INPUT_ID, OUTPUT_ID)
        }
        return cls(plan.depth, cost, remaining, facts)


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
