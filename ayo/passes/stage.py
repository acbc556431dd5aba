"""Stage decomposition: a batchable primitive whose input is larger than its engine's efficient
batch (from the engine profile) runs in micro-batches and emits them as a stream, so the
primitives after it start on the first micro-batch; an Aggregate closes the stream."""

from __future__ import annotations

from ayo.scheduler import EdgeKind, Node, Plan
from ayo.scheduler.ir.configs import BatchedConfig

from .manager import CompileContext, Pass
from .streams import item_count, streamify, takes_stream


def _decompose(plan: Plan, node: Node, ctx: CompileContext) -> Plan | None:
    if not isinstance(node.config, BatchedConfig) or not node.item_port or node.config.micro_batch:
        return None
    feed = plan.source(node.id, node.item_port)
    if feed is None or feed.kind == EdgeKind.STREAM:
        return None
    if feed.src == "input":
        n = ctx.shape.bucket().size(feed.src_port)
    else:
        n = item_count(plan, plan.node(feed.src), ctx.shape)
    batch = ctx.profile(node).efficient_batch
    if n is None or n <= batch:
        return None
    if not any(takes_stream(plan, e) for e in plan.out_edges(node.id)):
        return None  # nobody downstream could start early
    split = plan.replace_parts(
        tuple(x.with_(config={"micro_batch": batch}) if x.id == node.id else x for x in plan.nodes),
        plan.edges,
    )
    return streamify(split, node.id)


stage_decomposition = Pass("stage_decomposition", _decompose)
