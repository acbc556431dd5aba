"""Batching policies of an engine scheduler: which pending primitive requests form the next batch.

A policy orders; :func:`form_batch` fills. Policies:

- ``fcfs``: oldest request first.
- ``depth``: the paper's topology-aware batching. Requests are bucketed per query, buckets ordered
  by their query's earliest pending request; each round takes, from every bucket in turn, the
  requests at that bucket's greatest depth (depth = longest path to the plan's output), so one
  batch moves several queries forward along their longest paths instead of draining one query.
- ``critical_path``: ours. The query with the least remaining work goes first (shortest
  remaining processing time, good for mean latency), a request with slack (its remaining path
  shorter than its query's) ranking as if its query had that much more work to do, so within
  a query the critical path goes first and a request that can wait does, but only by its slack;
  keys are aged by waiting time so nothing starves; a request whose deadline is near (slack to
  its deadline below its own remaining path) goes first of all (earliest deadline).

  (Slack used to be a tier of its own: any request on some query's critical path before any
  with slack. With per-query documents that starved work: naive_rag's question embedding,
  issued as its query arrives and off the path while the query's own passages are embedded,
  was still "off the path" once they were done, and waited behind every later query's
  indexing; at 1x load the optimized plans ran at 0.77x of module by module.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

POLICIES = ("fcfs", "depth", "critical_path")


class PendingRequest:
    """One primitive of one query waiting in an engine scheduler's queue.

    Attributes:
        query_id: the query this primitive belongs to.
        node_id: the primitive's node in the query's plan (for traces and errors).
        payload: what the engine computes on (opaque here).
        items: batchable items it carries (texts, vectors, sequences); counts toward max_items.
        tokens: tokens it carries; counts toward max_tokens.
        depth: longest path (in primitives) from this node to the plan's output.
        remaining_ms: estimated time from this node's start to the query's end along its
            longest path (engine profiles), this node included.
        query_remaining_ms: the query's remaining critical-path time (max over its ready nodes).
        deadline: absolute time (the scheduler's clock) by which the query must end, or None.
        enqueued_at: when it entered the queue (the scheduler's clock).
        seq: arrival order in this queue, the final tie-break.
        op: the primitive's op name (metrics).
    """

    # A plain slots class, not a dataclass: one is made per engine call, and this __init__
    # checks its arguments without a second (__post_init__) call.
    __slots__ = (
        "deadline",
        "depth",
        "enqueued_at",
        "future",
        "items",
        "node_id",
        "op",
        "payload",
        "query_id",
        "query_remaining_ms",
        "remaining_ms",
        "seq",
        "tokens",
    )  # fmt: skip

    def __init__(
        self,
        query_id: int,
        node_id: str,
        payload: Any = None,
        items: int = 1,
        tokens: int = 0,
        depth: int = 0,
        remaining_ms: float = 0.0,
        query_remaining_ms: float = 0.0,
        deadline: float | None = None,
        enqueued_at: float = 0.0,
        seq: int = 0,
        op: str = "",
        future: Any = None,
    ) -> None:
        if items < 1 or tokens < 0:
            raise ValueError(f"{node_id}: items must be >= 1 and tokens >= 0")
        self.query_id = query_id
        self.node_id = node_id
        self.payload = payload
        self.items = items
        self.tokens = tokens
        self.depth = depth
        self.remaining_ms = remaining_ms
        self.query_remaining_ms = query_remaining_ms
        self.deadline = deadline
        self.enqueued_at = enqueued_at
        self.seq = seq
        self.op = op
        self.future = future  # set by the engine scheduler while queued or running

    def __repr__(self) -> str:
        return (
            f"PendingRequest(query_id={self.query_id}, node_id={self.node_id!r}, "
            f"items={self.items}, tokens={self.tokens}, depth={self.depth}, "
            f"remaining_ms={self.remaining_ms}, seq={self.seq})"
        )


@dataclass(frozen=True)
class BatchLimits:
    """Limits on one batch. ``max_wait_ms``: how long an idle engine waits for a batch to fill
    (0: dispatch at once). A single request larger than a limit still runs, alone."""

    max_items: int = 32
    max_tokens: int | None = None
    max_wait_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {self.max_items}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1 or None, got {self.max_tokens}")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {self.max_wait_ms}")


Order = Callable[[Sequence[PendingRequest], float], list[PendingRequest]]


def order_fcfs(pending: Sequence[PendingRequest], now: float) -> list[PendingRequest]:
    return sorted(pending, key=lambda r: r.seq)


def order_depth(pending: Sequence[PendingRequest], now: float) -> list[PendingRequest]:
    buckets: dict[int, list[PendingRequest]] = {}
    for r in sorted(pending, key=lambda r: r.seq):
        buckets.setdefault(r.query_id, []).append(r)
    queues = sorted(buckets.values(), key=lambda b: min(r.enqueued_at for r in b))
    for q in queues:
        q.sort(key=lambda r: (-r.depth, r.seq))
    ordered: list[PendingRequest] = []
    while queues:
        for q in queues:  # one round: each query's requests at its current greatest depth
            top = q[0].depth
            while q and q[0].depth == top:
                ordered.append(q.pop(0))
        queues = [q for q in queues if q]
    return ordered


@dataclass(frozen=True)
class CriticalPathOrder:
    """The ``critical_path`` order; ``aging_ms_per_ms``: how much each millisecond of waiting
    lowers a query's remaining-work key (0 disables aging)."""

    aging_ms_per_ms: float = 0.5

    def __call__(self, pending: Sequence[PendingRequest], now: float) -> list[PendingRequest]:
        def key(r: PendingRequest):
            waited_ms = max(0.0, (now - r.enqueued_at) * 1e3)
            urgent = False
            if r.deadline is not None:
                urgent = (r.deadline - now) * 1e3 <= r.remaining_ms
            slack = max(0.0, r.query_remaining_ms - r.remaining_ms)
            return (
                not urgent,
                r.deadline if urgent else 0.0,
                r.query_remaining_ms + slack - self.aging_ms_per_ms * waited_ms,
                -r.remaining_ms,
                r.seq,
            )

        return sorted(pending, key=key)


def make_order(policy: str, **options: float) -> Order:
    """The ordering function of a policy name (``POLICIES``)."""
    if policy == "fcfs":
        return order_fcfs
    if policy == "depth":
        return order_depth
    if policy == "critical_path":
        return CriticalPathOrder(**options)
    raise ValueError(f"unknown batching policy {policy!r}; choose one of {POLICIES}")


def sequence_order(order: Order, clock: Callable[[], float]) -> Callable[[list[Any]], list[Any]]:
    """An LLM engine's step order (``LLMEngine.set_step_order``) from a policy's ``order``: each
    sequence ranks as the :class:`PendingRequest` in its ``info`` (its latest primitive's);
    a sequence without one (work that did not come through the runtime) ranks as a request of
    query 0 that arrived first. Runs on the engine's worker thread: it only reads."""

    def ranked(seqs: list[Any]) -> list[Any]:
        requests = []
        by_request: dict[int, list[Any]] = {}
        for s in seqs:
            r = s.info if isinstance(s.info, PendingRequest) else PendingRequest(0, "", seq=-1)
            requests.append(r)
            by_request.setdefault(id(r), []).append(s)  # score children share their parent's
        return [by_request[id(r)].pop(0) for r in order(requests, clock())]

    return ranked


def form_batch(ordered: Sequence[PendingRequest], limits: BatchLimits) -> list[PendingRequest]:
    """Take requests in order while they fit the limits; a request that does not fit is
    skipped (a later, smaller one may fit), and the first request always runs."""
    batch: list[PendingRequest] = []
    items = tokens = 0
    for r in ordered:
        fits_items = items + r.items <= limits.max_items
        fits_tokens = limits.max_tokens is None or tokens + r.tokens <= limits.max_tokens
        if batch and not (fits_items and fits_tokens):
            continue
        batch.append(r)
        items += r.items
        tokens += r.tokens
        if items >= limits.max_items:
            break
    return batch
