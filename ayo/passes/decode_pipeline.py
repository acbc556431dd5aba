"""Decode pipelining: a Decode that writes a list feeding a primitive that takes items becomes a
PartialDecode streaming each item as soon as it is complete (one per line, or JSON array items),
closed by an explicit end of stream, so fewer items than expected never leave anyone waiting."""

from __future__ import annotations

from ayo.scheduler import Node, Op, Plan

from .manager import CompileContext, Pass
from .streams import streamify, takes_stream


def _pipeline(plan: Plan, node: Node, ctx: CompileContext) -> Plan | None:
    if node.op != Op.DECODE or node.item_port or node.config.parse == "text":
        return None
    if not any(takes_stream(plan, e) for e in plan.out_edges(node.id)):
        return None
    changed = plan.replace_parts(
        tuple(n.with_(op=Op.PARTIAL_DECODE) if n.id == node.id else n for n in plan.nodes),
        plan.edges,
    )
    return streamify(changed, node.id)


decode_pipelining = Pass("decode_pipelining", _pipeline)
