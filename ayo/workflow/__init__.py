"""The workflow API: modules wired by typed port references, and their decomposition."""

from ayo.scheduler import Prompt

from .agent import Agent
from .control import Aggregate, Condition, Map, Primitive
from .core import InputShape, Module, ModuleHandle, Workflow, WorkflowBuilder, lower
from .llm_modules import Generate, Judge, QueryExpansion, Synthesis
from .lowering import Lowering, Source
from .modules import TEMP, Embed, Indexing, KeywordSearch, Rerank, Search
from .refs import PortRef

__all__ = [
    "TEMP",
    "Agent",
    "Aggregate",
    "Condition",
    "Embed",
    "Generate",
    "Indexing",
    "InputShape",
    "Judge",
    "KeywordSearch",
    "Lowering",
    "Map",
    "Module",
    "ModuleHandle",
    "PortRef",
    "Primitive",
    "Prompt",
    "QueryExpansion",
    "Rerank",
    "Search",
    "Source",
    "Synthesis",
    "Workflow",
    "WorkflowBuilder",
    "lower",
]
