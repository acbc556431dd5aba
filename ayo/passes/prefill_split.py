"""Prefill split: prefill a prompt's early part while its late inputs are still produced.

The early part is the longest prefix of the template whose placeholders are all query inputs
(ready when the query starts). It becomes a PartialPrefill; a FullPrefill appends the rest once
the late inputs arrive. At run time the split falls on a token boundary of the whole rendered
prompt (see ``ayo.scheduler.runtime.handlers``). Skipped when the early part is estimated shorter than the
engine profile's ``prefill_split_min_tokens``, and when the query leaves the LLM no idle time
for it: the early part is computed in the LLM's idle steps, so it pays only if the work before
the late inputs keeps other engines busy at least as long as the early prefill takes
(search_gen's answer waits for its judge, an LLM call on the same engine, then a keyword search
of milliseconds: a split there only puts a background step in the judge's way).
"""

from __future__ import annotations

from ayo.scheduler import INPUT_ID, Edge, Node, Op, Plan, Port, PortType
from ayo.scheduler.ir.configs import FullPrefillConfig, PartialPrefillConfig
from ayo.scheduler.runtime.plan_costs import node_cost_ms

from .manager import CompileContext, Pass
from .streams import item_count


def idle_window_ms(plan: Plan, sources: set[str], engine: str, ctx: CompileContext) -> float:
    """How long ``engine`` is idle, by the profiles, in a query before every node of
    ``sources`` is done: the longest path to each (``engine``'s work on it included) minus the
    work on ``engine``'s resource that must come before it; the largest over ``sources``."""
    mine = ctx.resource(engine)
    finish: dict[str, float] = {}
    busy_before: dict[str, set[str]] = {}  # the nodes on ``engine``'s resource each waits for
    costs: dict[str, float] = {}
    for nid in plan.topo_order:
        node = plan.node(nid)
        items = item_count(plan, node, ctx.shape) if node.item_port else 1
        costs[nid] = node_cost_ms(node, ctx.profile(node), items or 1)
        ins = [e.src for e in plan.in_edges(nid)]
        finish[nid] = max((finish[s] for s in ins), default=0.0) + costs[nid]
        waits = set().union(*(busy_before[s] for s in ins)) if ins else set()
        on_mine = bool(node.engine) and ctx.resource(node.engine) == mine
        busy_before[nid] = waits | {nid} if on_mine else waits
    return max(finish[s] - sum(costs[n] for n in busy_before[s]) for s in sources)


def _split(plan: Plan, node: Node, ctx: CompileContext) -> Plan | None:
    if node.op != Op.PREFILL or node.item_port:
        return None
    prompt = node.config.prompt
    sources = {p: plan.source(node.id, p) for p in prompt.placeholders}
    early = {p for p, e in sources.items() if e is not None and e.src == INPUT_ID}
    if early == set(prompt.placeholders):
        return None  # everything is ready at once: nothing to overlap
    split_at = prompt.split_offset(early)
    head = [
        p
        for p in prompt.placeholders
        if p in early and prompt.template.find("{" + p + "}") < split_at
    ]
    profile = ctx.profile(node)
    estimate = len(
        ctx.tokenizer.encode(prompt.static_prefix(split_at))
    ) + profile.placeholder_tokens * len(head)
    if estimate < profile.prefill_split_min_tokens:
        return None
    late = {e.src for p, e in sources.items() if e is not None and p not in early}
    if idle_window_ms(plan, late, node.engine, ctx) < profile.latency.estimate_ms(1, estimate):
        return None  # no idle LLM time to hide it in
    seq = Port("seq", PortType.SEQ)
    control = tuple(p for p in node.inputs if p.control)
    partial = Node(
        f"{node.id}.partial",
        Op.PARTIAL_PREFILL,
        node.engine,
        PartialPrefillConfig(prompt, split_at),
        tuple(Port(p, PortType.TEXT) for p in head) + control,
        (seq,),
        node.module,
    )
    full = Node(
        f"{node.id}.full",
        Op.FULL_PREFILL,
        node.engine,
        FullPrefillConfig(prompt),
        (seq, *(p for p in node.inputs if not p.control)),
        (seq,),
        node.module,
    )
    edges: list[Edge] = []
    for e in plan.edges:
        if e.dst == node.id:
            if e.dst_port in head or e.dst_port in {p.name for p in control}:
                edges.append(e.with_(dst=partial.id))
            if e.dst_port in prompt.placeholders:
                edges.append(e.with_(dst=full.id))
        elif e.src == node.id:
            edges.append(e.with_(src=full.id))
        else:
            edges.append(e)
    edges.append(Edge(partial.id, "seq", full.id, "seq"))
    nodes: list[Node] = []
    for n in plan.nodes:
        nodes += [partial, full] if n.id == node.id else [n]
    return plan.replace_parts(nodes, edges)


prefill_split = Pass("prefill_split", _split)
