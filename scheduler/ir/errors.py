"""Errors raised while building, checking or rewriting a plan."""

from __future__ import annotations


class PlanError(Exception):
    """A plan (or the workflow it came from) is invalid.

    ``pass_name`` says which stage found the problem ("build", "lower", a pass name) and ``node``
    which node it concerns, when there is one; both are also part of the message.
    """

    def __init__(self, message: str, *, pass_name: str = "build", node: str | None = None) -> None:
        self.pass_name = pass_name
        self.node = node
        where = f"[{pass_name}]" + (f" node {node!r}" if node else "")
        super().__init__(f"{where}: {message}")


class CycleError(PlanError):
    """The graph has a cycle."""


class UnboundPortError(PlanError):
    """An input port has no edge, or more than one edge, feeding it."""


class PortTypeError(PlanError):
    """An edge connects ports whose types do not match."""


class UnknownPortError(PlanError):
    """An edge or binding names a node or port that does not exist."""


class StreamError(PlanError):
    """A stream edge is not consumed by a streaming primitive or never closed by an Aggregate."""


class PromptError(PlanError):
    """A prompt template has an unknown or unbound placeholder."""


class PassError(PlanError):
    """An optimization pass failed (its name and the node are in the message)."""


class ExecutionError(Exception):
    """A primitive failed while a plan was executed; names the node and keeps the cause."""

    def __init__(self, node: str, op: str, cause: BaseException) -> None:
        self.node = node
        self.op = op
        super().__init__(f"primitive {node!r} ({op}) failed: {type(cause).__name__}: {cause}")
        self.__cause__ = cause  # callers map the cause (e.g. HTTP status in ayo.server)
