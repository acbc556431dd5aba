"""Agent tools: named, user-registered Python functions (sync or async) with JSON-schema
arguments, which an Agent primitive's model may call.

A tool takes its arguments as keyword arguments and returns something JSON-serializable (a
string is passed on as it is). Registered by name, as map functions are, so plans stay hashable
and printable. Built in: ``calculator`` (arithmetic on numbers, no names, no calls) and
``search`` (passages of a collection; the Agent primitive runs it on its own embedder and
index, see ``scheduler/runtime/agent.py``).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ayo.engines.llm.tools import Tool

DEFAULT_TOOL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ToolFn:
    """``func(**arguments)`` (sync: run on a worker thread; async: awaited), ``parameters`` its
    arguments' JSON schema, at most ``timeout_s`` seconds a call."""

    name: str
    func: Callable[..., Any] | None
    description: str
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S

    def __post_init__(self) -> None:
        self.spec  # noqa: B018  (a bad name or schema fails at registration, not at a call)

    @property
    def spec(self) -> Tool:
        """What the model is shown (and its calls are constrained by)."""
        return Tool(self.name, self.description, dict(self.parameters))


TOOLS: dict[str, ToolFn] = {}


def register_tool(
    name: str,
    func: Callable[..., Any],
    description: str,
    parameters: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
) -> ToolFn:
    """Register ``func`` as tool ``name``; a name may be registered once (``ValueError``)."""
    fn = ToolFn(name, func, description, dict(parameters or {"type": "object"}), timeout_s)
    if name in TOOLS and TOOLS[name].func is not func:
        raise ValueError(f"tool {name!r} is already registered")
    TOOLS[name] = fn
    return fn


def get_tool(name: str) -> ToolFn:
    try:
        return TOOLS[name]
    except KeyError:
        raise KeyError(
            f"unknown tool {name!r}; register it with ayo.scheduler.register_tool "
            f"(registered: {sorted(TOOLS)})"
        ) from None


# ---- built-ins -------------------------------------------------------------------------------

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 1000


def calculate(expression: str) -> float | int:
    """The value of an arithmetic ``expression`` (numbers, + - * / // % **, parentheses);
    ``ValueError`` for anything else."""
    if not isinstance(expression, str) or len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"an expression is text of at most {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.replace("^", "**"), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None

    def value(node: ast.AST) -> float | int:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
                raise ValueError(f"exponents are at most {MAX_EXPONENT}")
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](value(node.operand))
        raise ValueError(f"only numbers and + - * / // % ** are allowed, got {expression!r}")

    try:
        result = value(tree.body)
    except ZeroDivisionError:
        raise ValueError("division by zero") from None
    if isinstance(result, float) and not math.isfinite(result):
        raise ValueError("the result is not a finite number")
    return result


CALCULATOR = register_tool(
    "calculator",
    calculate,
    "Compute an arithmetic expression, e.g. (1969 - 1879) * 2",
    {
        "type": "object",
        "properties": {"expression": {"type": "string", "maxLength": MAX_EXPRESSION_CHARS}},
        "required": ["expression"],
        "additionalProperties": False,
    },
)
SEARCH = register_tool(
    "search",
    None,  # run by the Agent primitive on its own engines
    "Search the encyclopedia; returns the passages that best match the query",
    {
        "type": "object",
        "properties": {"query": {"type": "string", "minLength": 2, "maxLength": 80}},
        "required": ["query"],
        "additionalProperties": False,
    },
)
