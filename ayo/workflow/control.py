"""Control modules (Condition, Aggregate, Map) and primitives written directly."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ayo.scheduler import Node, PlanError, PortType
from ayo.scheduler.ir import primitives as P
from ayo.scheduler.ir.functions import get_map

from .core import Module
from .lowering import Lowering, Source
from .refs import PortRef, freeze_bindings

B = PortType.BOOL
AGGREGATE_MODES = ("coalesce", "merge")


@dataclass(frozen=True)
class Condition(Module):
    """(flag: Bool, value) -> ``then`` carries value when flag is true, else ``else`` does;
    everything downstream of the branch not taken is skipped."""

    id: str
    flag: PortRef
    value: PortRef

    def refs(self) -> dict[str, PortRef]:
        return {"flag": self.flag, "value": self.value}

    def check(self, types: Mapping[str, PortType]) -> None:
        self.expect(types, "flag", B)

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        return {"then": types["value"], "else": types["value"]}

    def lower(self, b: Lowering) -> dict[str, Source]:
        value = b.src(self.value)
        node = b.add(P.condition(f"{self.id}.condition", value.type))
        b.wire(b.src(self.flag), node, "flag")
        b.wire(value, node, "value")
        return {"then": b.out(node, "then"), "else": b.out(node, "else")}


@dataclass(frozen=True)
class Aggregate(Module):
    """Two values -> one. ``coalesce``: whichever of two branch results was produced (the other
    branch was not taken); ``merge``: two lists concatenated (e.g. vector and keyword hits)."""

    id: str
    a: PortRef
    b: PortRef
    mode: str = "coalesce"

    def __post_init__(self) -> None:
        if self.mode not in AGGREGATE_MODES:
            raise PlanError(
                f"mode must be one of {AGGREGATE_MODES}, got {self.mode!r}", node=self.id
            )

    def refs(self) -> dict[str, PortRef]:
        return {"a": self.a, "b": self.b}

    def check(self, types: Mapping[str, PortType]) -> None:
        self.expect(types, "b", types["a"])
        if self.mode == "merge" and not types["a"].is_list:
            raise PlanError(f"merge takes lists, got {types['a'].value}", node=self.id)

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        return {"value": types["a"]}

    def lower(self, b: Lowering) -> dict[str, Source]:
        a = b.src(self.a)
        node = b.add(P.aggregate(f"{self.id}.{self.mode}", self.mode, a.type))
        b.wire(a, node, "a")
        b.wire(b.src(self.b), node, "b")
        return {"value": b.out(node)}


@dataclass(frozen=True)
class Map(Module):
    """Run a registered map function (``ayo.scheduler.register_map``) on bound inputs."""

    id: str
    fn: str
    bind: tuple[tuple[str, PortRef], ...] = ()
    params: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "bind", freeze_bindings(self.bind))
        object.__setattr__(self, "params", tuple(sorted(dict(self.params).items())))
        wanted = {p.name for p in get_map(self.fn).inputs}
        if set(dict(self.bind)) != wanted:
            raise PlanError(
                f"map {self.fn!r} takes inputs {sorted(wanted)}, bound {sorted(dict(self.bind))}",
                node=self.id,
            )

    def refs(self) -> dict[str, PortRef]:
        return dict(self.bind)

    def check(self, types: Mapping[str, PortType]) -> None:
        for p in get_map(self.fn).inputs:
            self.expect(types, p.name, p.type)

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        return {"value": get_map(self.fn).output}

    def lower(self, b: Lowering) -> dict[str, Source]:
        node = b.add(P.map_node(f"{self.id}.map", self.fn, **dict(self.params)))
        for name, ref in self.bind:
            b.wire(b.src(ref), node, name)
        return {"value": b.out(node)}


@dataclass(frozen=True)
class Primitive(Module):
    """One primitive written directly: ``node`` (its id is replaced by ``<id>.<op>``) with its
    input ports bound to references."""

    id: str
    node: Node
    bind: tuple[tuple[str, PortRef], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "bind", freeze_bindings(self.bind))
        wanted = {p.name for p in self.node.inputs}
        if set(dict(self.bind)) != wanted:
            raise PlanError(
                f"primitive takes inputs {sorted(wanted)}, bound {sorted(dict(self.bind))}",
                node=self.id,
            )

    def refs(self) -> dict[str, PortRef]:
        return dict(self.bind)

    def check(self, types: Mapping[str, PortType]) -> None:
        for p in self.node.inputs:
            self.expect(types, p.name, p.type)

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        return {p.name: p.type for p in self.node.outputs}

    def lower(self, b: Lowering) -> dict[str, Source]:
        node = b.add(self.node.with_(id=f"{self.id}.{self.node.op.value.lower()}"))
        for name, ref in self.bind:
            b.wire(b.src(ref), node, name)
        return {p.name: b.out(node, p.name) for p in node.outputs}
