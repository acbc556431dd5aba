"""Dependency pruning: drop edges that carry nothing a primitive reads.

Decomposition keeps module-by-module order with ordering-only (control) ports; those edges carry
no data, so removing them lets independent branches (document indexing and query expansion,
say) run in parallel. Primitives whose results reach no output, and that change nothing outside
the query, are dropped with their edges.
"""

from __future__ import annotations

from ayo.scheduler import TEMP_COLLECTION, Node, Op, Plan

from .manager import CompileContext, Pass


def _has_side_effect(node: Node) -> bool:
    return node.op in (Op.INPUT, Op.OUTPUT) or (
        node.op == Op.INGEST and node.config.collection != TEMP_COLLECTION
    )


def _prune(plan: Plan, node: Node, ctx: CompileContext) -> Plan | None:
    if not _has_side_effect(node) and node.id not in plan.live:
        orphaned = {(e.dst, e.dst_port) for e in plan.out_edges(node.id)}  # control ports it fed
        nodes = tuple(
            n.with_(
                inputs=tuple(p for p in n.inputs if not (p.control and (n.id, p.name) in orphaned))
            )
            for n in plan.nodes
            if n.id != node.id
        )
        return plan.replace_parts(
            nodes, tuple(e for e in plan.edges if node.id not in (e.src, e.dst))
        )
    control = {p.name for p in node.inputs if p.control}
    if not control:
        return None
    nodes = tuple(
        n.with_(inputs=tuple(p for p in n.inputs if not p.control)) if n.id == node.id else n
        for n in plan.nodes
    )
    edges = tuple(e for e in plan.edges if not (e.dst == node.id and e.dst_port in control))
    return plan.replace_parts(nodes, edges)


dependency_pruning = Pass("dependency_pruning", _prune)
