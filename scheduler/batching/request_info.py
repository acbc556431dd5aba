"""What the graph scheduler tells an engine proxy about the primitive now calling it.

The graph scheduler runs primitives in asyncio tasks and sets :data:`CURRENT` in each task to
the primitive it is running, so a batching proxy called from a handler can turn the call into a
:class:`PendingRequest` carrying the policy inputs (query, node, depth, remaining critical path,
deadline) without the handlers knowing about schedulers.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Protocol

from .policies import PendingRequest


class QueryState(Protocol):
    """The query-wide facts a request reads when it is queued."""

    deadline: float | None

    def remaining_ms(self) -> float:
        """The query's remaining critical-path time (max over its running primitives)."""
        ...

    def decoded(self, node_id: str, piece: Any) -> None:
        """A piece of text the LLM wrote for ``node_id`` (streamed answers)."""
        ...


class NodeInfo(Protocol):
    """A primitive's policy inputs, fixed per plan node (``runtime.NodeFacts``)."""

    node_id: str
    op: str
    depth: int
    remaining_ms: float


class RequestInfo:
    """The primitive on whose behalf an engine is being called. The graph scheduler makes one
    per primitive it runs in a task (a primitive's engine calls, and tasks it spawns and awaits,
    all happen in that task's context); others only read it.

    Attributes:
        query_id: the query's number (traces, per-query batching buckets).
        facts: the primitive's :class:`NodeInfo`: ``node_id`` (its node id in the plan),
            ``op`` (its op name, for metrics), ``depth`` (longest path from the node to the
            plan's output) and ``remaining_ms`` (estimated time from this node's start to the
            query's end, node included).
        query: the query's live state (remaining critical path, deadline, stream sink).
    """

    __slots__ = ("facts", "query", "query_id")

    def __init__(self, query_id: int, facts: NodeInfo, query: QueryState) -> None:
        self.query_id = query_id
        self.facts = facts
        self.query = query

    def __repr__(self) -> str:
        return f"RequestInfo(query {self.query_id}, node {self.facts.node_id!r})"


CURRENT: ContextVar[RequestInfo | None] = ContextVar("ayo_request_info", default=None)


def make_request(payload: Any, items: int = 1, tokens: int = 0) -> PendingRequest:
    """A :class:`PendingRequest` for ``payload`` on behalf of the current primitive (or an
    anonymous one, query 0, when called outside the graph scheduler)."""
    info = CURRENT.get()
    if items < 1:
        items = 1
    if info is None:
        return PendingRequest(0, "", payload, items, tokens)
    query, facts = info.query, info.facts
    return PendingRequest(
        info.query_id,
        facts.node_id,
        payload,
        items,
        tokens,
        depth=facts.depth,
        remaining_ms=facts.remaining_ms,
        query_remaining_ms=query.remaining_ms(),
        deadline=query.deadline,
        op=facts.op,
    )
