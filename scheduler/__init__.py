"""The executable primitive graph (IR), its checks, and a reference executor.

``ayo`` builds plans (modules -> primitives -> passes); this package defines what a plan is and
runs it. See DESIGN.md "Concepts" and "Runtime".
"""

from .engine_api import GREEDY, DecodeParams, Sampling
from .errors import (
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
from .functions import MAP_FUNCTIONS, MapFn, register_map
from .graph import INPUT_ID, OUTPUT_ID, Edge, EdgeKind, FrozenConfig, Node, Plan
from .ops import Op, OpInfo
from .plan_costs import PlanCosts
from .ports import Port, PortType
from .profile import DEFAULT_PROFILES, EngineProfile, LatencyModel
from .prompt import Prompt, RegexTokenizer, Tokenizer
from .runtime import DeadlineExceeded, GraphRun, QueryRun, execute
from .validate import validate
from .values import SKIPPED, Chunk, Doc, EndOfStream, SeqHandle

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
    "register_map",
    "validate",
]
