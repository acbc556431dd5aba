"""The critical-path bound: the least latency any schedule of a query's workflow could reach.

From one query's module-by-module run (each primitive alone on its engine: its measured time,
``Trace`` spans) and the workflow's data dependencies (the plan after dependency pruning: no
ordering-only edges), three lower bounds, the largest of which is the bound:

- path: the longest chain of dependent primitives. Where a consumer on another worker takes
  its producer's items one by one (an edge the stage-decomposition or decode-pipelining passes
  may turn into a stream), the two may overlap: the consumer starts with its producer and ends
  no earlier than it. A prompt whose early part is known first (the prefill-split pass) is prefilled in two
  parts: the early tokens' share of the measured prefill (at the LLM profile's cost per
  token) may run from the start.
- resource: the work of the busiest engine worker (the judge runs on the LLM, the reranker on
  the embedder's worker, the indexes on the event loop's thread).
- cores: all the work over the cores the engines may use together (each engine's worker has
  its thread budget; on a 2-core CPU with one thread each, two at a time).

Batching within one query (two LLM calls sharing steps) could beat the resource bound a little;
the workflows measured here issue their LLM calls one after another, or as one batched call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ayo.scheduler import INPUT_ID, OUTPUT_ID, Op, Plan, Prompt
from ayo.scheduler.ir.configs import DecodeConfig
from ayo.scheduler.profiles.profile import profile_for

# engine name -> the worker whose time it uses (the default engines)
WORKERS: Mapping[str, str] = {
    "llm": "llm",
    "judge": "llm",
    "embedder": "embedder",
    "reranker": "embedder",
    "index": "event loop",
    "keyword": "event loop",
}


@dataclass(frozen=True)
class Bound:
    """The three lower bounds (s) and the bound itself (their maximum)."""

    path_s: float
    resource_s: float
    cores_s: float
    busiest: str

    @property
    def seconds(self) -> float:
        return max(self.path_s, self.resource_s, self.cores_s)

    @property
    def limit(self) -> str:
        """What sets the bound: ``path``, the busiest worker, or ``cores``."""
        best = max((self.path_s, "path"), (self.resource_s, self.busiest), (self.cores_s, "cores"))
        return best[1]


def busy_seconds(spans: Iterable[object]) -> dict[str, float]:
    """Per node id, the time its spans cover (overlapping spans of one node counted once)."""
    by_node: dict[str, list[tuple[float, float]]] = {}
    for s in spans:
        by_node.setdefault(s.node_id, []).append((s.start, s.end))  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    for node, intervals in by_node.items():
        total, end = 0.0, float("-inf")
        for a, b in sorted(intervals):
            if b > end:
                total += b - max(a, end)
                end = b
        out[node] = total
    return out


def _streams_items(plan: Plan, src: str) -> bool:
    """Whether ``src`` can hand its output on item by item: an engine primitive that works per
    item, or a decode writing a list (decode pipelining)."""
    if src == INPUT_ID:
        return False
    node = plan.node(src)
    if isinstance(node.config, DecodeConfig):
        return node.config.parse != "text"
    return bool(node.item_port) and bool(node.op.info.engine_kind)


def critical_path_bound(
    plan: Plan, seconds: Mapping[str, float], engines: Mapping[str, str], cores: int
) -> Bound:
    """The bound of one query (see the module doc). ``plan``: its workflow after dependency
    pruning; ``seconds``: each primitive's measured time alone (by node id; absent: 0);
    ``engines``: engine name -> worker; ``cores``: how many workers may compute at once."""
    from ayo.passes.streams import takes_stream

    def worker(nid: str) -> str:
        engine = plan.node(nid).engine
        return engines.get(engine, engine) if engine else nid

    start: dict[str, float] = {}
    finish: dict[str, float] = {}
    for nid in plan.topo_order:
        d = seconds.get(nid, 0.0)
        s = f = 0.0
        for e in plan.in_edges(nid):
            if e.src not in finish:
                continue
            overlap = worker(e.src) != worker(nid) and takes_stream(plan, e)
            if overlap and _streams_items(plan, e.src):
                s = max(s, start[e.src])
                f = max(f, finish[e.src])
            else:
                s = max(s, finish[e.src])
        start[nid], finish[nid] = s, max(f, s + d)
    per_worker: dict[str, float] = {}
    for n in plan.nodes:
        if n.id in (INPUT_ID, OUTPUT_ID) or not n.engine or n.op == Op.CONDITION:
            continue
        worker = engines.get(n.engine, n.engine)
        per_worker[worker] = per_worker.get(worker, 0.0) + seconds.get(n.id, 0.0)
    busiest = max(per_worker, key=per_worker.__getitem__, default="-")
    total = sum(per_worker.values())
    return Bound(finish.get(OUTPUT_ID, 0.0), per_worker.get(busiest, 0.0), total / cores, busiest)


def query_bound(
    app: Any, name: str, inputs: Mapping[str, Any], spans: Iterable[object],
    workers: Mapping[str, str], cores: int,
) -> Bound:  # fmt: skip
    """The bound of one query of workflow ``name`` on ``app``, from the spans of its
    module-by-module run: its plan after dependency pruning and prefill splitting, each
    primitive's measured time, a split prefill's time shared between its parts."""
    plan = app.plan(name, inputs, optimize={"prune", "split"})
    seconds = busy_seconds(spans)
    for node in plan.nodes:
        if node.op != Op.PARTIAL_PREFILL:
            continue
        (edge,) = [e for e in plan.out_edges(node.id) if e.src_port == "seq"]
        whole = seconds.get(edge.dst.removesuffix(".full"), 0.0)
        head = Prompt(node.config.prompt.template[: node.config.split_at]).render(inputs)
        per_token_ms = profile_for(app.profiles, node.engine, "llm").latency.per_token_ms
        early = min(whole, len(app.plans.tokenizer.encode(head)) * per_token_ms / 1e3)
        seconds[node.id], seconds[edge.dst] = early, whole - early
    return critical_path_bound(plan, seconds, workers, cores)
