"""Helpers shared by the passes that turn edges into streams."""

from __future__ import annotations

from ayo.scheduler import Edge, EdgeKind, Node, Op, Plan
from ayo.scheduler.ir import primitives as P
from ayo.scheduler.ir.configs import AggregateConfig, DecodeConfig, MapConfig, micro_batch
from ayo.scheduler.ir.functions import get_map
from ayo.workflow.core import InputShape


def takes_stream(plan: Plan, edge: Edge) -> bool:
    """Whether ``edge.dst`` can consume ``edge`` as a stream and pass a stream on."""
    dst = plan.node(edge.dst)
    if (
        dst.op in (Op.OUTPUT, Op.AGGREGATE)
        or dst.item_port != edge.dst_port
        or micro_batch(dst.config)
    ):
        return False
    return not any(e.kind == EdgeKind.STREAM and e != edge for e in plan.in_edges(dst.id))


def streamify(plan: Plan, node_id: str) -> Plan:
    """Make every out-edge of ``node_id`` a stream; consumers that take it per item stream on,
    every other consumer gets the whole value from an Aggregate inserted before it."""
    nodes = {n.id: n for n in plan.nodes}
    edges = list(plan.edges)
    work = [node_id]
    while work:
        nid = work.pop(0)
        current = Plan(plan.name, tuple(nodes.values()), tuple(edges))
        for e in current.out_edges(nid):
            if e.kind == EdgeKind.STREAM:
                continue
            i = edges.index(e)
            if takes_stream(current, e):
                edges[i] = e.with_(kind=EdgeKind.STREAM)
                work.append(e.dst)
                continue
            port = nodes[nid].output(e.src_port)
            agg_id = f"{nid}.{e.src_port}.collect"
            if agg_id not in nodes:
                mode = "concat" if port.type.is_list else "same"
                nodes[agg_id] = P.aggregate(agg_id, mode, port.type, module=nodes[nid].module)
                edges.append(Edge(nid, e.src_port, agg_id, "items", EdgeKind.STREAM))
            edges[i] = Edge(agg_id, "value", e.dst, e.dst_port)
    return Plan(plan.name, tuple(nodes.values()), tuple(edges))


def item_count(
    plan: Plan, node: Node, ctx_shape: InputShape, _memo: dict | None = None
) -> int | None:
    """Estimated item count of ``node``'s list output (None: unknown), from the input shape."""
    memo = {} if _memo is None else _memo
    if node.id in memo:
        return memo[node.id]
    memo[node.id] = None  # guards against cycles (validation rejects them anyway)

    def size_of(port: str) -> int | None:
        e = plan.source(node.id, port)
        if e is None:
            return None
        if e.src == "input":
            return ctx_shape.bucket().size(e.src_port)
        return item_count(plan, plan.node(e.src), ctx_shape, memo)

    cfg = node.config
    if isinstance(cfg, MapConfig):
        spec = get_map(cfg.fn)
        first = next((p.name for p in spec.inputs if p.type.is_list), None)
        result = spec.size(cfg.params, size_of(first) if first else None) if spec.size else None
    elif node.op in (Op.SEARCH, Op.KEYWORD_SEARCH):
        n = size_of(node.item_port)
        result = None if n is None else n * cfg.k
    elif node.op == Op.RERANK:
        result = cfg.top_k
    elif isinstance(cfg, DecodeConfig) and not node.item_port:
        result = cfg.max_items or None
    elif isinstance(cfg, AggregateConfig):
        result = size_of("items") if cfg.mode == "concat" else None
    elif node.item_port:
        result = size_of(node.item_port)
    else:
        result = None
    memo[node.id] = result
    return result
