"""References between a workflow's modules: output ``port`` of module ``module``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ayo.scheduler import PlanError

INPUTS = "input"  # the pseudo-module whose ports are the workflow inputs


@dataclass(frozen=True)
class PortRef:
    """Output ``port`` of module ``module`` (module ``"input"``: a workflow input)."""

    module: str
    port: str

    def __str__(self) -> str:
        return f"{self.module}.{self.port}"


def freeze_bindings(
    bind: Mapping[str, PortRef] | tuple[tuple[str, PortRef], ...],
) -> tuple[tuple[str, PortRef], ...]:
    """Bindings as a sorted tuple of pairs (hashable); checks every value is a PortRef."""
    pairs = tuple(sorted(dict(bind).items()))
    for name, ref in pairs:
        if not isinstance(ref, PortRef):
            raise PlanError(
                f"binding {name!r} must be a port reference (e.g. wf.input(...) or module['port']), got {ref!r}"
            )
    return pairs
