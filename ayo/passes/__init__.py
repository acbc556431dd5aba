"""Optimization passes (pure functions plan -> plan) and the compiler that runs them.

``compile_workflow(workflow, ...)`` = decomposition (``ayo.workflow.lower``) followed, when
``optimize`` asks for it, by the passes run to a fixed point by a ``PassManager``: all four
(``optimize=True``), none (``False``: module by module), or those named (``{"prune", "split"}``:
an ablation; names in ``PASSES``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ayo.scheduler import Plan
from ayo.workflow import Workflow, lower

from .chat import format_prompts
from .decode_pipeline import decode_pipelining
from .manager import CompileContext, Pass, PassManager
from .prefill_split import prefill_split
from .prune import dependency_pruning
from .stage import stage_decomposition

# The passes by their short names, in the order they run.
PASSES: Mapping[str, Pass] = {
    "prune": dependency_pruning,
    "decompose": stage_decomposition,
    "split": prefill_split,
    "pipeline": decode_pipelining,
}
DEFAULT_PASSES: tuple[Pass, ...] = tuple(PASSES.values())

Optimize = bool | frozenset[str]  # all passes, none, or those named


def pass_set(names: Iterable[str]) -> frozenset[str]:
    """The named passes as a plan-cache key; ``ValueError`` names an unknown one."""
    chosen = frozenset(names)
    unknown = sorted(chosen - PASSES.keys())
    if unknown:
        raise ValueError(f"unknown passes {unknown}; the passes are {', '.join(PASSES)}")
    return chosen


def compile_workflow(
    workflow: Workflow, ctx: CompileContext | None = None, optimize: Optimize = True
) -> Plan:
    """The plan for ``workflow``: unoptimized (module by module), optimized, or optimized by
    the passes named in ``optimize``. Either way its prompts are in the model's format (chat
    templates rendered, see ``chat.py``)."""
    ctx = ctx or CompileContext()
    plan = format_prompts(lower(workflow), ctx)
    if optimize is True:
        passes = DEFAULT_PASSES
    elif optimize is False:
        passes = ()
    else:
        chosen = pass_set(optimize)
        passes = tuple(p for name, p in PASSES.items() if name in chosen)
    return PassManager(passes).run(plan, ctx) if passes else plan


__all__ = [
    "DEFAULT_PASSES",
    "PASSES",
    "CompileContext",
    "Optimize",
    "Pass",
    "PassManager",
    "compile_workflow",
    "decode_pipelining",
    "dependency_pruning",
    "pass_set",
    "prefill_split",
    "stage_decomposition",
]
