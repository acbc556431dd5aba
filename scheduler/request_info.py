"""What the graph scheduler tells an engine proxy about the primitive now calling it.

The graph scheduler runs primitives in asyncio tasks and sets :data:`CURRENT` in each task to
the primitive it is running, so a batching proxy called from a handler can turn the call into a
:class:`PendingRequest` carrying the policy inputs (query, node, depth, remaining critical path,
deadline) without the handlers knowing about schedulers.
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


@dataclass(slots=True)
class RequestInfo:
    """The primitive on whose behalf an engine is being called. The graph scheduler makes one
    per task and updates it as the task runs one primitive after another (a primitive's engine
    calls, and tasks it spawns and awaits, all happen while it runs); others only read it.

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
    query = info.query
    return PendingRequest(
        info.query_id, info.node_id, payload, items, tokens, info.depth, info.remaining_ms,
        query.remaining_ms(), query.deadline, 0.0, 0, info.op,
    )  # fmt: skip
