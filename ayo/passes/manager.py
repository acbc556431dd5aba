"""The pass manager: runs rewrite passes to a fixed point, checking the plan after each one."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ayo.scheduler import (
    DEFAULT_PROFILES,
    EngineProfile,
    Node,
    PassError,
    Plan,
    PlanError,
    RegexTokenizer,
    Tokenizer,
    validate,
)
from ayo.scheduler.profiles.profile import profile_for
from ayo.workflow.core import InputShape

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompileContext:
    """What passes may read: engine profiles (by engine name or kind), the tokenizer used to
    estimate prompt lengths at plan time, the shape of the query's inputs, and which engine
    names compute on one resource (``resources``: name -> a shared key, e.g. the judge on the
    LLM; a name absent is its own)."""

    profiles: Mapping[str, EngineProfile] = field(default_factory=lambda: dict(DEFAULT_PROFILES))
    tokenizer: Tokenizer = field(default_factory=RegexTokenizer, compare=False, hash=False)
    shape: InputShape = field(default_factory=InputShape)
    resources: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    def profile(self, node: Node) -> EngineProfile:
        return profile_for(self.profiles, node.engine, node.op.info.engine_kind, node.op.value)

    def resource(self, engine: str) -> str:
        """The resource engine ``engine`` computes on."""
        return self.resources.get(engine, engine)


NodeRewrite = Callable[[Plan, Node, CompileContext], "Plan | None"]


@dataclass(frozen=True)
class Pass:
    """A named rewrite. ``rewrite(plan, node, ctx)`` returns a new plan when it changes ``node``,
    else None; the pass visits nodes in topological order. Errors are raised as ``PassError``
    naming the pass and the node."""

    name: str
    rewrite: NodeRewrite

    def __call__(self, plan: Plan, ctx: CompileContext) -> Plan:
        for nid in plan.topo_order:
            if nid not in plan.node_map:
                continue
            try:
                new = self.rewrite(plan, plan.node(nid), ctx)
            except PlanError as exc:
                raise PassError(str(exc), pass_name=self.name, node=exc.node or nid) from exc
            except Exception as exc:
                raise PassError(
                    f"{type(exc).__name__}: {exc}", pass_name=self.name, node=nid
                ) from exc
            if new is not None:
                plan = new
        return plan


class PassManager:
    """Runs ``passes`` in order, repeatedly, until a whole round changes nothing."""

    def __init__(self, passes: Sequence[Pass], max_rounds: int = 8) -> None:
        self.passes = tuple(passes)
        self.max_rounds = max_rounds

    def run(self, plan: Plan, ctx: CompileContext) -> Plan:
        for round_ in range(self.max_rounds):
            before = plan
            for p in self.passes:
                after = p(plan, ctx)
                if after != plan:
                    validate(after, p.name)
                    logger.debug(
                        "plan %s: pass %s changed it (round %d)", plan.name, p.name, round_
                    )
                plan = after
            if plan == before:
                return plan
        raise PassError(f"no fixed point after {self.max_rounds} rounds", pass_name="pass_manager")
