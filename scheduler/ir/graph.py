"""The primitive graph: immutable nodes, edges and plans.

A ``Plan`` is shared by every query that runs it, so it never holds per-query state; the
executor keeps that in its own objects. Plans are values: equal plans compare equal and hash
equal, which is how the pass manager detects its fixed point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property
from typing import Any

from .configs import FrozenConfig, NodeConfig
from .ops import Op
from .ports import Port

__all__ = ["INPUT_ID", "OUTPUT_ID", "Edge", "EdgeKind", "FrozenConfig", "Node", "Plan", "RunShape"]

INPUT_ID = "input"
OUTPUT_ID = "output"


class EdgeKind(str, Enum):
    """``value``: one value when the producer finishes; ``stream``: chunks, then an explicit end."""

    VALUE = "value"
    STREAM = "stream"


@dataclass(frozen=True)
class Node:
    """One primitive: ``op`` run on the engine named ``engine`` ("" for control ops), with its
    op's settings ``config`` (``ir.configs``).

    ``module`` names the workflow module this primitive came from (for pictures and traces).
    """

    id: str
    op: Op
    engine: str = ""
    config: NodeConfig = field(default_factory=NodeConfig)
    inputs: tuple[Port, ...] = ()
    outputs: tuple[Port, ...] = ()
    module: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.config, NodeConfig):
            raise TypeError(
                f"node {self.id!r}: config must be a NodeConfig (ayo.scheduler.ir.configs), "
                f"got {type(self.config).__name__}"
            )
        for ports, what in ((self.inputs, "input"), (self.outputs, "output")):
            names = [p.name for p in ports]
            if len(set(names)) != len(names):
                raise ValueError(f"node {self.id!r} has duplicate {what} port names {names}")

    @cached_property
    def _input_ports(self) -> dict[str, Port]:
        return {p.name: p for p in self.inputs}

    def input(self, name: str) -> Port | None:
        """The input port called ``name``, or None."""
        return self._input_ports.get(name)

    def output(self, name: str) -> Port | None:
        """The output port called ``name``, or None."""
        return next((p for p in self.outputs if p.name == name), None)

    @property
    def item_port(self) -> str:
        """The input that may take a stream (per-op default, or the node's own: a Prefill
        mapped over a list, a Decode over sequences, a Map of an item-wise function)."""
        return self.config.item_port or self.op.info.item_port

    def with_(self, **changes: Any) -> Node:
        """A copy with fields replaced (``config`` may be a dict of config fields to change)."""
        if isinstance(changes.get("config"), dict):
            changes["config"] = self.config.with_(**changes["config"])
        return replace(self, **changes)


@dataclass(frozen=True)
class Edge:
    """Data from ``src``'s output ``src_port`` to ``dst``'s input ``dst_port``."""

    src: str
    src_port: str
    dst: str
    dst_port: str
    kind: EdgeKind = EdgeKind.VALUE

    def with_(self, **changes: Any) -> Edge:
        return replace(self, **changes)


@dataclass(frozen=True)
class RunShape:
    """Per-plan starting state of an execution: value in-degree per node, the stream edges,
    the query input names, and the primitives with no inputs (ready at once)."""

    pending: Mapping[str, int]
    streams: tuple[Edge, ...]
    inputs: tuple[str, ...]
    sources: tuple[Node, ...]


@dataclass(frozen=True)
class Plan:
    """An immutable primitive graph. Node ``input`` holds the query inputs as output ports;
    node ``output`` takes the query outputs as input ports."""

    name: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]

    @cached_property
    def node_map(self) -> dict[str, Node]:
        """Nodes by id."""
        return {n.id: n for n in self.nodes}

    def node(self, node_id: str) -> Node:
        return self.node_map[node_id]

    @cached_property
    def _in_edges(self) -> dict[str, tuple[Edge, ...]]:
        acc: dict[str, list[Edge]] = {n.id: [] for n in self.nodes}
        for e in self.edges:
            acc.setdefault(e.dst, []).append(e)
        return {k: tuple(v) for k, v in acc.items()}

    @cached_property
    def _out_edges(self) -> dict[str, tuple[Edge, ...]]:
        acc: dict[str, list[Edge]] = {n.id: [] for n in self.nodes}
        for e in self.edges:
            acc.setdefault(e.src, []).append(e)
        return {k: tuple(v) for k, v in acc.items()}

    def in_edges(self, node_id: str) -> tuple[Edge, ...]:
        """Edges into ``node_id``, in plan order."""
        return self._in_edges.get(node_id, ())

    def out_edges(self, node_id: str) -> tuple[Edge, ...]:
        """Edges out of ``node_id``, in plan order."""
        return self._out_edges.get(node_id, ())

    def source(self, node_id: str, port: str) -> Edge | None:
        """The edge feeding input ``port`` of ``node_id`` (the first, if wrongly several)."""
        return next((e for e in self.in_edges(node_id) if e.dst_port == port), None)

    @cached_property
    def run_shape(self) -> RunShape:
        """What each execution of the plan starts from (computed once per plan)."""
        pending = {n.id: 0 for n in self.nodes}
        streams = []
        for e in self.edges:
            if e.kind == EdgeKind.STREAM:
                streams.append(e)
            else:
                pending[e.dst] += 1
        return RunShape(
            pending,
            tuple(streams),
            tuple(p.name for p in self.node_map[INPUT_ID].outputs)
            if INPUT_ID in self.node_map
            else (),
            tuple(
                n for n in self.nodes if n.id not in (INPUT_ID, OUTPUT_ID) and pending[n.id] == 0
            ),
        )

    @cached_property
    def topo_order(self) -> tuple[str, ...]:
        """Node ids in a topological order (Kahn, ties in plan order). Assumes no cycle."""
        indeg = {n.id: 0 for n in self.nodes}
        for e in self.edges:
            indeg[e.dst] += 1
        ready = [n.id for n in self.nodes if indeg[n.id] == 0]
        order: list[str] = []
        while ready:
            nid = ready.pop(0)
            order.append(nid)
            for e in self.out_edges(nid):
                indeg[e.dst] -= 1
                if indeg[e.dst] == 0:
                    ready.append(e.dst)
        return tuple(order)

    @cached_property
    def live(self) -> frozenset[str]:
        """Nodes with a data path to the output node (ordering-only control edges excluded)."""
        live = {OUTPUT_ID}
        for nid in reversed(self.topo_order):
            for e in self.out_edges(nid):
                port = self.node_map[e.dst].input(e.dst_port)
                if e.dst in live and port is not None and not port.control:
                    live.add(nid)
                    break
        return frozenset(live)

    @cached_property
    def depth(self) -> dict[str, int]:
        """Longest path (in edges) from each node to the output node; 0 for ``output``."""
        result: dict[str, int] = {}
        for nid in reversed(self.topo_order):
            outs = [result[e.dst] + 1 for e in self.out_edges(nid) if e.dst in result]
            result[nid] = max(outs, default=0)
        return result

    def replace_parts(
        self, nodes: tuple[Node, ...] | list[Node], edges: tuple[Edge, ...] | list[Edge]
    ) -> Plan:
        """A new plan with the same name and the given nodes and edges."""
        return Plan(self.name, tuple(nodes), tuple(edges))
