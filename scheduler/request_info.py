"""What the graph scheduler tells an engine proxy about the primitive now calling it.

The executor runs each primitive in its own asyncio task and sets :data:`CURRENT` there, so a
batching proxy called from a handler can turn the call into a :class:`PendingRequest` carrying the
policy inputs (query, node, depth, remaining critical path, deadline) without the handlers
knowing about schedulers.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from .batching import PendingRequest


class QueryState(Protocol):
    """The query-wide facts a request reads when it is queued."""

    deadline: float | None

    def remaining_ms(self) -> float:
        """The query's remaining critical-path time (max over its running primitives)."""
        ...

    def decoded(self, node_id: str, piece: Any) -> None:
        """A piece of text the LLM wrote for ``node_id`` (streamed answers)."""
        ...


@dataclass(frozen=True)
class RequestInfo:
    """The primitive on whose behalf an engine is being called.

    Attributes:
        query_id: the query's number (traces, per-query batching buckets).
        node_id: the primitive's node id in the plan.
        op: the primitive's op name (metrics).
        depth: longest path from the node to the plan's output (``Plan.depth``).
        remaining_ms: estimated time from this node's start to the query's end, node included.
        query: the query's live state (remaining critical path, deadline, stream sink).
    """

    query_id: int
    node_id: str
    op: str
    depth: int
    remaining_ms: float
    query: QueryState


CURRENT: ContextVar[RequestInfo | None] = ContextVar("ayo_request_info", default=None)


def make_request(payload: Any, items: int = 1, tokens: int = 0) -> PendingRequest:
    """A :class:`PendingRequest` for ``payload`` on behalf of the current primitive (or an
    anonymous one, query 0, when called outside the graph scheduler)."""
    info = CURRENT.get()
    items = max(1, items)
    if info is None:
        return PendingRequest(0, "", payload, items, tokens)
    return PendingRequest(
        info.query_id,
        info.node_id,
        payload,
        items,
        tokens,
        depth=info.depth,
        remaining_ms=info.remaining_ms,
        query_remaining_ms=info.query.remaining_ms(),
        deadline=info.query.deadline,
        extra={"op": info.op},
    )
