"""Ayo's paged-KV LLM engine: ``from ayo.engines.llm import LLMEngine, SamplingParams``.

Continuous batching with chunked prefill, prefix caching and preemption, and the primitives the
orchestrator needs: ``open`` / ``prefill`` (callable many times) / ``decode`` (a stream) /
``score`` / ``close`` on live sequences whose KV stays resident between calls.
"""

from .config import EngineConfig, ModelConfig, SamplingParams
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
    EngineStats,
    GenerationResult,
    SequenceHandle,
)
from .stream import DecodeStream

__all__ = [
    "CandidateScore",
    "ContextLengthExceeded",
    "DecodeEnd",
    "DecodePiece",
    "DecodeStream",
    "EngineClosed",
    "EngineConfig",
    "EngineError",
    "EngineStats",
    "GenerationResult",
    "InvalidRequest",
    "LLMEngine",
    "ModelConfig",
    "ModelNotFound",
    "SamplingParams",
    "SequenceClosed",
    "SequenceHandle",
    "UnknownSequence",
]
