"""What a module emits its primitives into (:class:`Lowering`) and where a value comes from in
the plan being built (:class:`Source`); ``core.lower`` drives it, module by module."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ayo.scheduler import Edge, Node, PlanError, Port, PortType
from ayo.scheduler.ir.graph import INPUT_ID
from ayo.scheduler.ir.primitives import input_node

from .refs import INPUTS, PortRef


@dataclass(frozen=True)
class Source:
    """Where a value comes from in the plan: output ``port`` of node ``node``, of ``type``."""

    node: str
    port: str
    type: PortType


class Lowering:
    """Collects the primitives one module emits; passed to ``Module.lower``."""

    def __init__(self, inputs: Sequence[Port]) -> None:
        self.nodes: list[Node] = [input_node(inputs)]
        self.edges: list[Edge] = []
        self._sources = {(INPUTS, p.name): Source(INPUT_ID, p.name, p.type) for p in inputs}
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
