"""What the graph scheduler tells an engine proxy about the primitive now calling it.

The graph scheduler makes one :class:`RequestInfo` per primitive it runs and hands it to the
primitive's handler, which passes it (``info=``) to every engine call it makes; a batching proxy
turns the call into a :class:`PendingRequest` carrying the policy inputs (query, node, depth,
remaining critical path, deadline).
"""

from __future__ import annotations

from typing import Any, Protocol

from .policies import PendingRequest


class QueryState(Protocol):
    """The query-wide facts a request reads when it is queued."""

    deadline: float | None

    def remaining_ms(self) -> float:
        """The query's remaining critical-path time (max over its running primitives)."""
        ...

    def decoded(self, node_id: str, text: str) -> None:
        """A piece of text the LLM wrote for ``node_id`` (streamed answers)."""
        ...


class NodeInfo(Protocol):
    """A primitive's policy inputs, fixed per plan node (``runtime.NodeFacts``)."""

    node_id: str
    op: str
    depth: int
    remaining_ms: float


class RequestInfo:
    """The primitive on whose behalf an engine is being called.

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


def make_request(
    payload: Any, info: RequestInfo | None, items: int = 1, tokens: int = 0
) -> PendingRequest:
    """A :class:`PendingRequest` for ``payload`` on behalf of ``info``'s primitive (or an
    anonymous one, query 0, for a call from outside the graph scheduler)."""
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
