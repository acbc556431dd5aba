"""What a plan is and how it runs. ``ayo`` builds plans (modules -> primitives -> passes);
this package defines them and schedules them. See DESIGN.md "Concepts" and "Runtime".

Sub-packages, each importing only those above it:

- ``ir``: the plan (graph, ops, node configs, ports, values, errors, prompts, parsers, Map
  registry, the engine protocols), its checks (``validate``) and rendering (``render``);
- ``profiles``: engine profiles and the profiler;
- ``batching``: the engine schedulers (policies, queues, admission, request info) and the
  batching proxies;
- ``runtime``: the per-query graph scheduler, the primitives' handlers, per-plan costs;
- ``sim``: fake and simulated engines.

The names users import are re-exported here.
"""

from ayo.engines.llm.sampling import SamplingParams

from .ir import configs, functions, primitives  # modules imported by name (``primitives as P``)
from .ir.configs import TEMP_COLLECTION, FrozenConfig, NodeConfig
from .ir.engine_api import KINDS, Engine
from .ir.errors import (
    CycleError,
    ExecutionError,
    PassError,
    PlanError,
    PortTypeError,
    PromptError,
    StreamError,
    UnboundPortError,
    UnknownPortError,
)
from .ir.functions import MAP_FUNCTIONS, MapFn, register_map
from .ir.graph import INPUT_ID, OUTPUT_ID, Edge, EdgeKind, Node, Plan
from .ir.ops import Op, OpInfo
from .ir.ports import Port, PortType
from .ir.prompt import Prompt, RegexTokenizer, Tokenizer
from .ir.render import plan_to_dot, plan_to_json
from .ir.tools import TOOLS, ToolFn, register_tool
from .ir.validate import validate
from .ir.values import SKIPPED, Chunk, Doc, EndOfStream, SeqHandle
from .profiles.profile import DEFAULT_PROFILES, EngineProfile, LatencyModel
from .runtime.graph_run import DeadlineExceeded, GraphRun, execute
from .runtime.plan_costs import PlanCosts

__all__ = [
    "DEFAULT_PROFILES",
    "INPUT_ID",
    "KINDS",
    "MAP_FUNCTIONS",
    "OUTPUT_ID",
    "SKIPPED",
    "TEMP_COLLECTION",
    "TOOLS",
    "Chunk",
    "CycleError",
    "DeadlineExceeded",
    "Doc",
    "Edge",
    "EdgeKind",
    "EndOfStream",
    "Engine",
    "EngineProfile",
    "ExecutionError",
    "FrozenConfig",
    "GraphRun",
    "LatencyModel",
    "MapFn",
    "Node",
    "NodeConfig",
    "Op",
    "OpInfo",
    "PassError",
    "Plan",
    "PlanCosts",
    "PlanError",
    "Port",
    "PortType",
    "PortTypeError",
    "Prompt",
    "PromptError",
    "RegexTokenizer",
    "SamplingParams",
    "SeqHandle",
    "StreamError",
    "Tokenizer",
    "ToolFn",
    "UnboundPortError",
    "UnknownPortError",
    "configs",
    "execute",
    "functions",
    "plan_to_dot",
    "plan_to_json",
    "primitives",
    "register_map",
    "register_tool",
    "validate",
]
