"""Optimization passes (pure functions plan -> plan) and the compiler that runs them.

``compile_workflow(workflow, ...)`` = decomposition (``ayo.workflow.lower``) followed, when
``optimize`` is true, by the four passes run to a fixed point by a ``PassManager``.
"""

from __future__ import annotations

from ayo.scheduler import Plan
from ayo.workflow import Workflow, lower

from .chat import format_prompts
from .decode_pipeline import decode_pipelining
from .manager import CompileContext, Pass, PassManager
from .prefill_split import prefill_split
from .prune import dependency_pruning
from .stage import stage_decomposition

DEFAULT_PASSES: tuple[Pass, ...] = (
    dependency_pruning,
    stage_decomposition,
    prefill_split,
    decode_pipelining,
)


def compile_workflow(
    workflow: Workflow, ctx: CompileContext | None = None, optimize: bool = True
) -> Plan:
    """The plan for ``workflow``: unoptimized (module by module) or optimized. Either way its
    prompts are in the model's format (chat templates rendered, see ``chat.py``)."""
    ctx = ctx or CompileContext()
    plan = format_prompts(lower(workflow), ctx)
    if not optimize:
        return plan
    return PassManager(DEFAULT_PASSES).run(plan, ctx)


__all__ = [
    "DEFAULT_PASSES",
    "CompileContext",
    "Pass",
    "PassManager",
    "compile_workflow",
    "decode_pipelining",
    "dependency_pruning",
    "prefill_split",
    "stage_decomposition",
]
