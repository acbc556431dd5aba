"""Decomposition: a workflow's modules become a plan of primitives.

The plan keeps module-by-module order with ordering-only (control) edges: each module's first
primitives wait for the previous module's last ones, as a module-at-a-time orchestrator would
run them. That plan is the unoptimized baseline; dependency pruning removes those edges.
"""

from __future__ import annotations

from dataclasses import dataclass

from ayo.scheduler import Edge, Node, Plan, PlanError, Port, PortType, validate
from ayo.scheduler.ir.graph import INPUT_ID
from ayo.scheduler.ir.primitives import control_port, input_node, output_node

from .core import INPUTS, PortRef, Workflow


@dataclass(frozen=True)
class Source:
    """Where a value comes from in the plan: output ``port`` of node ``node``, of ``type``."""

    node: str
    port: str
    type: PortType


class Lowering:
    """Collects the primitives one module emits; passed to ``Module.lower``."""

    def __init__(self, workflow: Workflow) -> None:
        self.workflow = workflow
        self.nodes: list[Node] = [input_node(workflow.inputs)]
        self.edges: list[Edge] = []
        self._sources = {
            (INPUTS, p.name): Source(INPUT_ID, p.name, p.type) for p in workflow.inputs
        }
        self.module = ""

    def src(self, ref: PortRef) -> Source:
        """The plan source of a module input reference."""
        key = (ref.module, ref.port)
        if key not in self._sources:
            raise PlanError(f"unbound reference {ref}", pass_name="lower", node=self.module)
        return self._sources[key]

    def add(self, node: Node) -> Node:
        """Add a primitive of the current module (its ``module`` field is set here)."""
        node = node.with_(module=self.module)
        self.nodes.append(node)
        return node

    def wire(self, source: Source, node: Node | str, port: str) -> None:
        """Connect ``source`` to input ``port`` of ``node``."""
        self.edges.append(
            Edge(source.node, source.port, node if isinstance(node, str) else node.id, port)
        )

    def out(self, node: Node, port: str | None = None) -> Source:
        """A source for output ``port`` (default: the only output) of ``node``."""
        p = node.outputs[0] if port is None else node.output(port)
        if p is None:
            raise PlanError(f"no output {port!r}", pass_name="lower", node=node.id)
        return Source(node.id, p.name, p.type)

    def expose(self, module_id: str, outputs: dict[str, Source]) -> None:
        for port, source in outputs.items():
            self._sources[(module_id, port)] = source


def lower(workflow: Workflow) -> Plan:
    """Decompose ``workflow`` into the unoptimized, module-by-module plan (validated)."""
    b = Lowering(workflow)
    previous: list[str] = []
    for module in workflow.modules:
        b.module = module.id
        start = len(b.nodes)
        b.expose(module.id, module.lower(b))
        mine = {n.id for n in b.nodes[start:]}
        _order_after(b, start, mine, previous)
        fed = {e.src for e in b.edges if e.src in mine}
        previous = [nid for nid in (n.id for n in b.nodes[start:]) if nid not in fed]
    b.module = ""
    out = output_node(Port(name, b.src(ref).type) for name, ref in workflow.outputs)
    b.nodes.append(out)
    for name, ref in workflow.outputs:
        b.wire(b.src(ref), out, name)
    return validate(Plan(workflow.name, tuple(b.nodes), tuple(b.edges)), "lower")


def _order_after(b: Lowering, start: int, mine: set[str], previous: list[str]) -> None:
    """Make this module's entry primitives wait for the previous module's exit primitives."""
    if not previous:
        return
    internal = {e.dst for e in b.edges if e.src in mine and e.dst in mine}
    for i in range(start, len(b.nodes)):
        node = b.nodes[i]
        if node.id in internal:
            continue
        ports = list(node.inputs)
        for prev in previous:
            port = control_port(len(ports))
            ports.append(port)
            src = next(n for n in b.nodes if n.id == prev)
            b.edges.append(Edge(prev, src.outputs[0].name, node.id, port.name))
        b.nodes[i] = node.with_(inputs=tuple(ports))
