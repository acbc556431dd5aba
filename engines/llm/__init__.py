"""Ayo's paged-KV LLM engine: ``from ayo.engines.llm import LLMEngine, SamplingParams``.

Continuous batching with chunked prefill, prefix caching and preemption, and the primitives the
orchestrator needs: ``open`` / ``prefill`` (callable many times) / ``decode`` (a stream) /
``score`` / ``close`` on live sequences whose KV stays resident between calls.

Names are resolved lazily (module ``__getattr__``): the torch-free parts (``SamplingParams``,
the decode pieces, the errors) import without loading torch, so plans and the server's request
parsing can use them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import EngineConfig, ModelConfig
    from .engine import LLMEngine
    from .errors import (
        ContextLengthExceeded,
        EngineClosed,
        EngineError,
        InvalidRequest,
        ModelNotFound,
        SequenceClosed,
        UnknownSequence,
    )
    from .outputs import (
        CandidateScore,
        DecodeEnd,
        DecodePiece,
        GenerationResult,
        LLMStats,
        SequenceHandle,
        TokenLogprobs,
    )
    from .sampling import Grammar, SamplingParams
    from .stream import DecodeStream
    from .tokenizer import ChatTokenizer

_EXPORTS = {
    "EngineConfig": "config",
    "ModelConfig": "config",
    "LLMEngine": "engine",
    "ContextLengthExceeded": "errors",
    "EngineClosed": "errors",
    "EngineError": "errors",
    "InvalidRequest": "errors",
    "ModelNotFound": "errors",
    "SequenceClosed": "errors",
    "UnknownSequence": "errors",
    "CandidateScore": "outputs",
    "DecodeEnd": "outputs",
    "DecodePiece": "outputs",
    "GenerationResult": "outputs",
    "LLMStats": "outputs",
    "SequenceHandle": "outputs",
    "TokenLogprobs": "outputs",
    "Grammar": "sampling",
    "SamplingParams": "sampling",
    "DecodeStream": "stream",
    "ChatTokenizer": "tokenizer",
}

__all__ = [
    "CandidateScore",
    "ChatTokenizer",
    "ContextLengthExceeded",
    "DecodeEnd",
    "DecodePiece",
    "DecodeStream",
    "EngineClosed",
    "EngineConfig",
    "EngineError",
    "GenerationResult",
    "Grammar",
    "InvalidRequest",
    "LLMEngine",
    "LLMStats",
    "ModelConfig",
    "ModelNotFound",
    "SamplingParams",
    "SequenceClosed",
    "SequenceHandle",
    "TokenLogprobs",
    "UnknownSequence",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
