"""What a plan is and how it runs. ``ayo`` builds plans (modules -> primitives -> passes);
this package defines them and schedules them. See DESIGN.md "Concepts" and "Runtime".

Sub-packages, each importing only those above it:

- ``ir``: the plan (graph, ops, ports, values, errors, prompts, parsers, Map registry, engine
  interfaces), its checks (``validate``) and rendering (``render``);
- ``profiles``: engine profiles and the profiler;
- ``batching``: the engine schedulers (policies, queues, admission, request info) and the
  batching proxies;
- ``runtime``: the per-query graph scheduler, the primitives' handlers, per-plan costs;
- ``sim``: fake and simulated engines.

The names users import are re-exported here.
"""

from .ir import functions, primitives  # modules imported by name (``primitives as P``)
from .ir.engine_api import GREEDY, DecodeParams, Sampling
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
from .ir.graph import INPUT_ID, OUTPUT_ID, Edge, EdgeKind, FrozenConfig, Node, Plan
from .ir.ops import Op, OpInfo
from .ir.ports import Port, PortType
from .ir.prompt import Prompt, RegexTokenizer, Tokenizer
from .ir.validate import validate
from .ir.values import SKIPPED, Chunk, Doc, EndOfStream, SeqHandle
from .profiles.profile import DEFAULT_PROFILES, EngineProfile, LatencyModel
from .runtime.graph_run import DeadlineExceeded, GraphRun, QueryRun, execute
from .runtime.plan_costs import PlanCosts

__all__ = [
    "DEFAULT_PROFILES",
    "GREEDY",
    "INPUT_ID",
    "MAP_FUNCTIONS",
    "OUTPUT_ID",
    "SKIPPED",
    "Chunk",
    "CycleError",
    "DeadlineExceeded",
    "DecodeParams",
    "Doc",
    "Edge",
    "EdgeKind",
    "EndOfStream",
    "EngineProfile",
    "ExecutionError",
    "FrozenConfig",
    "GraphRun",
    "LatencyModel",
    "MapFn",
    "Node",
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
    "QueryRun",
    "RegexTokenizer",
    "Sampling",
    "SeqHandle",
    "StreamError",
    "Tokenizer",
    "UnboundPortError",
    "UnknownPortError",
    "execute",
    "functions",
    "primitives",
    "register_map",
    "validate",
]
