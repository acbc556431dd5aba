"""Stage decomposition: a batchable primitive whose input is larger than its engine's efficient
batch (from the engine profile) runs in micro-batches and emits them as a stream, so the
primitives after it start on the first micro-batch; an Aggregate closes the stream.

How many micro-batches is a cost decision, read from the engine profiles: ``k`` micro-batches
let the streamed consumers' per-item work overlap the producer, all but the last micro-batch's
share of it (``(1 - 1/k)`` of it), and cost ``k - 1`` more fixed costs of the producer and of
each consumer. The pass takes the ``k`` that gains most (about ``sqrt(n * consumer per item /
fixed costs)``), micro-batches of at least the efficient batch, and leaves the primitive whole
when no ``k`` gains. Small micro-batches were measured to cost more than their fixed cost too:
the embedder packs a batch by length, so 20 batches of 16 wiki passages took 12% longer than one
of 320 on a 2-core CPU, for an ingest that takes milliseconds.

LLM primitives are never cut: the engine batches every sequence in flight into each step, and a
decode step costs about the same for 24 sequences as for 8 (it reads the weights once), so
micro-batches of an LLM map only add steps (contextual_rag's context writing: 29 steps instead of
24 in the simulator, 12.0 s of decoding instead of 7.4 s on the CPU engine).
"""

from __future__ import annotations

import math

from ayo.scheduler import EdgeKind, Node, Plan
from ayo.scheduler.ir.configs import BatchedConfig

from .manager import CompileContext, Pass
from .streams import item_count, streamify, takes_stream


def micro_batches(n: int, producer_fixed_ms: float, consumers: list[tuple[float, float]],
                  min_batch: int) -> int:  # fmt: skip
    """The number of micro-batches ``k`` (1: leave it whole) for ``n`` items whose producer
    costs ``producer_fixed_ms`` per batch and whose streamed consumers cost (fixed ms, ms per
    item) each: the ``k`` maximizing ``overlap(k) - (k - 1) * fixed``, micro-batches of at
    least ``min_batch`` items."""
    per_item = sum(c for _, c in consumers)
    fixed = producer_fixed_ms + sum(f for f, _ in consumers)
    k_max = n // max(1, min_batch)
    if k_max < 2 or per_item <= 0:
        return 1

    def gain(k: int) -> float:
        return n * per_item * (1 - 1 / k) - (k - 1) * fixed

    guess = math.sqrt(n * per_item / fixed) if fixed > 0 else k_max
    candidates = {2, k_max, max(2, min(k_max, math.floor(guess))), min(k_max, math.ceil(guess))}
    best = max(candidates, key=gain)
    return best if gain(best) > 0 else 1


def _stream_consumers(plan: Plan, node: Node) -> list[Node]:
    """The engine primitives a stream out of ``node`` would reach, through control ones (a Map)
    that pass it on."""
    found: list[Node] = []
    seen: set[str] = set()
    work = [e for e in plan.out_edges(node.id) if takes_stream(plan, e)]
    while work:
        dst = plan.node(work.pop().dst)
        if dst.id in seen:
            continue
        seen.add(dst.id)
        if dst.op.info.engine_kind:
            found.append(dst)
        work += [e for e in plan.out_edges(dst.id) if takes_stream(plan, e)]
    return found


def _decompose(plan: Plan, node: Node, ctx: CompileContext) -> Plan | None:
    if not isinstance(node.config, BatchedConfig) or not node.item_port or node.config.micro_batch:
        return None
    if node.op.info.engine_kind == "llm":
        return None  # the engine batches continuously (see the module doc)
    feed = plan.source(node.id, node.item_port)
    if feed is None or feed.kind == EdgeKind.STREAM:
        return None
    if feed.src == "input":
        n = ctx.shape.bucket().size(feed.src_port)
    else:
        n = item_count(plan, plan.node(feed.src), ctx.shape)
    profile = ctx.profile(node)
    if n is None or n <= profile.efficient_batch:
        return None
    consumers = _stream_consumers(plan, node)
    if not consumers:
        return None  # no engine work downstream could start early
    costs = [(p.latency.fixed_ms, p.latency.per_item_ms) for p in map(ctx.profile, consumers)]
    k = micro_batches(n, profile.latency.fixed_ms, costs, profile.efficient_batch)
    if k < 2:
        return None
    batch = math.ceil(n / k)
    split = plan.replace_parts(
        tuple(x.with_(config={"micro_batch": batch}) if x.id == node.id else x for x in plan.nodes),
        plan.edges,
    )
    return streamify(split, node.id)


stage_decomposition = Pass("stage_decomposition", _decompose)
