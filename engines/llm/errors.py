"""LLM-engine request errors, under the shared engine hierarchy (``ayo.engines.errors``)."""

from __future__ import annotations

from ..errors import EngineClosed, EngineError, InvalidRequest, ModelNotFound


class UnknownSequence(InvalidRequest):
    """The handle names no sequence this engine opened."""


class SequenceClosed(InvalidRequest):
    """The sequence was closed (by ``close``, a cancelled decode, or a failure)."""


class ContextLengthExceeded(InvalidRequest):
    """The tokens would not fit the context window."""


__all__ = [
    "ContextLengthExceeded",
    "EngineClosed",
    "EngineError",
    "InvalidRequest",
    "ModelNotFound",
    "SequenceClosed",
    "UnknownSequence",
]
