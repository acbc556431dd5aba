"""Workflows: immutable templates of modules wired by explicit, typed port references."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ayo.scheduler import Edge, Plan, PlanError, Port, PortType, PortTypeError, validate
from ayo.scheduler.ir.ports import compatible
from ayo.scheduler.ir.primitives import control_port, output_node

from .lowering import Lowering, Source
from .refs import INPUTS, PortRef, freeze_bindings

__all__ = [
    "INPUTS",
    "InputShape",
    "Module",
    "ModuleHandle",
    "PortRef",
    "Workflow",
    "WorkflowBuilder",
    "freeze_bindings",
    "lower",
]


class Module:
    """A coarse step of a workflow that decomposes into primitives.

    Subclasses are frozen dataclasses with an ``id`` and implement ``refs`` (the bound inputs),
    ``check`` (input types; raise ``PlanError``), ``output_types`` and ``lower``.
    """

    id: str

    def refs(self) -> dict[str, PortRef]:
        raise NotImplementedError

    def check(self, types: Mapping[str, PortType]) -> None:
        """Raise PlanError when a bound input has the wrong type (``types``: by input name)."""

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        raise NotImplementedError

    def lower(self, b: Lowering) -> dict[str, Source]:
        """Emit this module's primitives into ``b``; return its outputs' sources."""
        raise NotImplementedError

    def expect(self, types: Mapping[str, PortType], name: str, *allowed: PortType) -> None:
        """Raise PortTypeError when input ``name`` is not one of ``allowed``."""
        got = types[name]
        if not any(compatible(got, a) for a in allowed):
            want = " or ".join(a.value for a in allowed)
            raise PortTypeError(f"input {name!r} expects {want}, got {got.value}", node=self.id)


@dataclass(frozen=True)
class Workflow:
    """An immutable workflow template: inputs, modules in a dependency order, outputs."""

    name: str
    inputs: tuple[Port, ...]
    modules: tuple[Module, ...]
    outputs: tuple[tuple[str, PortRef], ...]

    def __hash__(self) -> int:
        # Computed once: the plan cache hashes the workflow on every lookup.
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.name, self.inputs, self.modules, self.outputs))
            object.__setattr__(self, "_hash", cached)
        return cached


class ModuleHandle:
    """Returned by ``WorkflowBuilder.add``: ``handle["port"]`` references an output port."""

    def __init__(self, module: Module, outputs: Mapping[str, PortType]) -> None:
        self.module = module
        self._outputs = dict(outputs)

    def __getitem__(self, port: str) -> PortRef:
        if port not in self._outputs:
            raise PlanError(
                f"module has no output {port!r} (outputs: {', '.join(self._outputs)})",
                node=self.module.id,
            )
        return PortRef(self.module.id, port)


@dataclass
class WorkflowBuilder:
    """Builds a ``Workflow``; every reference and type is checked when a module is added."""

    name: str
    _inputs: list[Port] = field(default_factory=list)
    _modules: list[Module] = field(default_factory=list)
    _types: dict[PortRef, PortType] = field(default_factory=dict)
    _outputs: list[tuple[str, PortRef]] = field(default_factory=list)

    def input(self, name: str, type: PortType = PortType.TEXT) -> PortRef:
        """Declare a query input; returns a reference to it."""
        ref = PortRef(INPUTS, name)
        if ref in self._types:
            raise PlanError(f"input {name!r} declared twice", node=INPUTS)
        self._inputs.append(Port(name, type))
        self._types[ref] = type
        return ref

    def add(self, module: Module) -> ModuleHandle:
        """Add ``module`` after the modules it reads from; returns a handle to its outputs."""
        if module.id in (INPUTS, "output") or any(m.id == module.id for m in self._modules):
            raise PlanError("module id is reserved or already used", node=module.id)
        if "." in module.id:
            raise PlanError("module ids may not contain '.'", node=module.id)
        types: dict[str, PortType] = {}
        for name, ref in module.refs().items():
            if ref not in self._types:
                raise PlanError(
                    f"input {name!r} refers to {ref}, which is not an output of an input or an earlier module",
                    node=module.id,
                )
            types[name] = self._types[ref]
        module.check(types)
        outputs = module.output_types(types)
        for port, t in outputs.items():
            self._types[PortRef(module.id, port)] = t
        self._modules.append(module)
        return ModuleHandle(module, outputs)

    def output(self, name: str, ref: PortRef) -> None:
        """Expose ``ref`` as query output ``name``."""
        if ref not in self._types:
            raise PlanError(f"output {name!r} refers to unknown port {ref}", node="output")
        if any(n == name for n, _ in self._outputs):
            raise PlanError(f"output {name!r} declared twice", node="output")
        self._outputs.append((name, ref))

    def type_of(self, ref: PortRef) -> PortType:
        return self._types[ref]

    def build(self) -> Workflow:
        """The immutable workflow; needs at least one output."""
        if not self._outputs:
            raise PlanError(
                "a workflow needs at least one output (call .output(name, ref))", node="output"
            )
        return Workflow(self.name, tuple(self._inputs), tuple(self._modules), tuple(self._outputs))


@dataclass(frozen=True)
class InputShape:
    """Which inputs a query has and how many items each list input holds.

    Plans depend on the shape (an absent optional input removes its branch; a long list is cut
    into micro-batches), so the plan cache keys on ``bucket()``: sizes rounded up to a power of two.
    """

    sizes: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, inputs: Mapping[str, Any]) -> InputShape:
        """Shape of concrete query inputs: list lengths, 1 for scalars; None values are absent."""
        sizes = {
            k: (len(v) if isinstance(v, (list, tuple)) else 1)
            for k, v in inputs.items()
            if v is not None
        }
        return cls(tuple(sorted(sizes.items())))

    @classmethod
    def from_sizes(cls, **sizes: int) -> InputShape:
        return cls(tuple(sorted(sizes.items())))

    def has(self, name: str) -> bool:
        return any(n == name for n, _ in self.sizes)

    def size(self, name: str) -> int | None:
        return next((s for n, s in self.sizes if n == name), None)

    def bucket(self) -> InputShape:
        """Sizes rounded up to the next power of two (0 and 1 stay)."""
        return InputShape(
            tuple((n, 1 << (s - 1).bit_length() if s > 1 else s) for n, s in self.sizes)
        )


def lower(workflow: Workflow) -> Plan:
    """Decompose ``workflow`` into the unoptimized, module-by-module plan (validated). The
    plan keeps module-by-module order with ordering-only (control) edges: each module's first
    primitives wait for the previous module's last ones, as a module-at-a-time orchestrator
    would run them. That plan is the unoptimized baseline; dependency pruning removes those
    edges."""
    b = Lowering(workflow.inputs)
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
