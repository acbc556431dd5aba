"""The Agent module: a loop the plan cannot unroll in advance (see ``scheduler/runtime/agent.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ayo.scheduler import PlanError, PortType, Prompt
from ayo.scheduler.ir import primitives as P
from ayo.scheduler.ir.configs import AgentConfig

from .core import Module
from .lowering import Lowering, Source
from .refs import PortRef, freeze_bindings


@dataclass(frozen=True)
class Agent(Module):
    """The model works on ``task`` (a prompt whose placeholders are bound like an LLM
    module's), calling ``tools`` (registered names, ``ayo.scheduler.register_tool``; built in:
    ``search`` over ``collection``, ``calculator``) until it answers or ``max_steps``; the
    answer ends at a ``stop`` string or after ``max_sentences`` sentences (0: no limit).
    Outputs ``answer`` (text) and ``steps`` (each step's text, calls and results, then a
    summary: ``finish_reason``, tokens ``prefilled`` and ``reprefilled``)."""

    id: str
    task: Prompt
    bind: tuple[tuple[str, PortRef], ...] = ()
    tools: tuple[str, ...] = ("search",)
    system: str = ""
    max_steps: int = 4
    max_tokens: int = 96
    required_steps: int = 0
    parallel: bool = True
    collection: str = "default"
    k: int = 2
    llm: str = "llm"
    embedder: str = "embedder"
    index: str = "index"
    stop: tuple[str, ...] = ()
    max_sentences: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "bind", freeze_bindings(self.bind))
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "stop", tuple(self.stop))
        if not isinstance(self.task, Prompt):
            raise PlanError(f"task must be a Prompt, got {type(self.task).__name__}", node=self.id)
        self.task.check_bindings(set(dict(self.bind)), node=self.id)
        P.agent(self.id, self.llm, self._config())  # unknown tools, bad limits: refused now

    def _config(self) -> AgentConfig:
        return AgentConfig(
            self.task, self.system, self.tools, self.max_steps, self.max_tokens,
            self.required_steps, self.parallel, self.embedder, self.index, self.collection,
            self.k, self.stop, self.max_sentences,
        )  # fmt: skip

    def refs(self) -> dict[str, PortRef]:
        return dict(self.bind)

    def check(self, types: Mapping[str, PortType]) -> None:
        for name in dict(self.bind):
            self.expect(types, name, PortType.TEXT)

    def output_types(self, types: Mapping[str, PortType]) -> dict[str, PortType]:
        return {"answer": PortType.TEXT, "steps": PortType.ANY}

    def lower(self, b: Lowering) -> dict[str, Source]:
        node = b.add(P.agent(f"{self.id}.agent", self.llm, self._config()))
        for name, ref in self.bind:
            b.wire(b.src(ref), node, name)
        return {"answer": b.out(node, "answer"), "steps": b.out(node, "steps")}
