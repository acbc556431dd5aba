"""Validated configuration dataclasses: the model's shape and the engine's limits (sampling:
``sampling.py``)."""

from __future__ import annotations

import json
import logging
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import InvalidRequest
from .formats import ACTIVATIONS, DENSE_FORMATS, QUANTIZED_FORMATS, WEIGHT_FORMATS

log = logging.getLogger(__name__)
# The formats ``weights="auto"`` chooses among: those whose answer quality holds
AUTO_CANDIDATES = ("fp32", "bf16", "int8", "int4")

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _cpuinfo(key: str) -> str | None:
    """The value of the first /proc/cpuinfo line starting with ``key`` (None without one)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith(key))
    except (OSError, StopIteration):
        return None


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    return frozenset((_cpuinfo("flags") or "").split())


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo, else what ``platform`` knows)."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def amx_bf16() -> bool:
    """Whether the CPU has AMX bf16 tiles: oneDNN's bfloat16 matmuls then beat float32 ones
    (measured by ``benchmarks.llm_engine``); without them bfloat16 is emulated and slower."""
    return "amx_bf16" in cpu_flags()


def probe_keys() -> tuple[str, ...]:
    """The format keys timed on this CPU (``quant.format_key``): every weights format in its
    default dtype, and where the CPU multiplies bfloat16 natively (AVX-512-BF16, AMX) the
    quantized formats with bfloat16 activations too."""
    from .attention import native_bf16_matmul

    extra = [f"{f}-bfloat16" for f in QUANTIZED_FORMATS] if native_bf16_matmul() else []
    return (*WEIGHT_FORMATS, *extra)


def measured_formats(keys: tuple[str, ...] | None = None) -> dict[str, dict[str, float]]:
    """:func:`quant.time_formats` of ``keys`` (default :func:`probe_keys`) on this CPU model,
    thread count and torch: measured once (~1 s) and stored in the cache directory
    (``$AYO_CACHE_DIR``, default ``~/.cache/ayo``, ``formats.json``); later starts read it."""
    keys = keys or probe_keys()
    key = f"{cpu_model()}|{torch.get_num_threads()} threads|torch {torch.__version__}"
    path = Path(os.environ.get("AYO_CACHE_DIR", Path.home() / ".cache" / "ayo")) / "formats.json"
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        stored = {}
    stored = stored if isinstance(stored, dict) else {}
    times = stored.get(key) if isinstance(stored.get(key), dict) else {}
    missing = [
        k for k in keys
        if not (isinstance(times.get(k), dict) and {"request_s", "dense_from"} <= set(times[k]))
    ]  # fmt: skip
    if not missing:
        return times
    from .quant import time_formats

    times = stored[key] = {**times, **time_formats(tuple(missing))}
    log.info("timed the weights formats on this CPU (%s): %s", key, times)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(stored, indent=1))
        tmp.replace(path)
    except OSError as exc:
        log.warning("could not store the weights formats' timing in %s: %s", path, exc)
    return times


def auto_formats() -> tuple[str, str, str]:
    """What ``dtype="auto", weights="auto"`` resolve to on this CPU, and why: ``(dtype,
    weights, reason)``: the format (and activation dtype, :func:`probe_keys`) whose matmuls run
    a request of 256 prompt tokens and 256 decode steps fastest (:func:`measured_formats`),
    among :data:`AUTO_CANDIDATES`, the formats whose answer quality holds (docs/benchmarks.md,
    "Weights formats against llama.cpp")."""
    from .quant import split_key

    measured = measured_formats()
    times = {
        k: measured[k]["request_s"] for k in probe_keys() if split_key(k)[0] in AUTO_CANDIDATES
    }
    best = min(times, key=times.__getitem__)
    second = min((k for k in times if k != best), key=times.__getitem__)
    reason = (
        f"fastest measured on this CPU: {times[best] * 1e3:.0f} ms of one layer's matmuls per "
        f"request against {times[second] * 1e3:.0f} for {second}"
    )
    weights, dtype = split_key(best)
    return dtype, weights, reason


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a Llama-family decoder, read from config.json or GGUF metadata."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # Qwen2: bias on q, k and v
    rope_scaling_factor: float = 1.0
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise InvalidRequest(
                f"unsupported architecture {self.architecture!r}; this engine runs "
                f"{', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        if self.num_heads % self.num_kv_heads:
            raise InvalidRequest(
                f"num_attention_heads {self.num_heads} is not a multiple of "
                f"num_key_value_heads {self.num_kv_heads}"
            )
        if self.head_dim % 2:
            raise InvalidRequest(
                f"head_dim must be even for rotary embeddings, got {self.head_dim}"
            )

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


@dataclass(frozen=True)
class EngineConfig:
    """Limits and modes of one engine instance.

    Attributes:
        dtype: the activations' and the KV cache's dtype: ``"float32"`` (fidelity: with fp32
            weights token-for-token equal to transformers), ``"bfloat16"`` (half the bytes;
            fast where the CPU has native bfloat16) or ``"auto"``: with ``weights="auto"``
            :func:`auto_formats`'s choice for this CPU, else the weights format's default
            (``formats.ACTIVATIONS``). None (the default): float32, or that default.
        weights: the matmul weights' format: ``"fp32"``, ``"bf16"`` (dense, equal to the
            dtype), ``"int8"`` (per output row), ``"int4"`` (groups of 32; a GGUF's Q4_1
            blocks as they are; see ``engines/llm/quant.py``) or ``"auto"``: the dense format
            of the dtype, or with ``dtype="auto"`` the format measured fastest here.
        dense_prefill: quantized weights keep their dense copy (oneDNN-packed) for matmuls of
            many rows (prefill, batched decode), where it is faster: the dense bytes in memory.
        block_size: tokens per KV block.
        num_blocks: KV blocks per layer; ``None`` sizes the cache from ``kv_cache_gib``.
        kv_cache_gib: memory for the KV cache of all layers when ``num_blocks`` is None.
        max_num_batched_tokens: token budget of one step (decodes + prefill chunks).
        max_num_seqs: most sequences computed in one step.
        max_model_len: context window; ``None`` takes the model's (capped by the cache size).
        enable_prefix_caching: share full KV blocks across sequences by chained token hashes.
        num_threads: torch intra-op threads for the worker; ``None`` leaves torch's default.
        attention: ``"auto"`` (the matmul path on CPU, ``ayo.kernels`` elsewhere), ``"kernels"``
            or ``"matmul"`` (see ``engines/llm/attention.py``).
        max_new_tokens: a cap on every decode's ``max_tokens`` (None: as each asks), e.g. to
            keep a CPU benchmark tractable; it applies to optimized and unoptimized plans alike.
    """

    dtype: str | None = None  # resolved in __post_init__ (None: float32 unless weights say)
    weights: str = "auto"
    block_size: int = 16
    num_blocks: int | None = None
    kv_cache_gib: float = 1.0
    max_num_batched_tokens: int = 512
    max_num_seqs: int = 128
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    num_threads: int | None = None
    attention: str = "auto"
    max_new_tokens: int | None = None
    dense_prefill: bool = True
    # why dtype and weights "auto" chose what they did ("" when both were given)
    format_reason: str = field(default="", init=False, compare=False)

    def __post_init__(self) -> None:
        if self.weights not in ("auto", *WEIGHT_FORMATS):
            raise InvalidRequest(
                f"weights must be 'auto' or one of {list(WEIGHT_FORMATS)}, got {self.weights!r}"
            )
        dtype, weights = self.dtype, self.weights
        if dtype is None:
            dtype = "float32" if weights == "auto" else ACTIVATIONS[weights]
        if dtype == "auto" and weights == "auto":
            dtype, weights, reason = auto_formats()
            object.__setattr__(self, "format_reason", reason)
        elif dtype == "auto":
            dtype = ACTIVATIONS[weights]
        elif weights == "auto":
            weights = {v: k for k, v in DENSE_FORMATS.items()}.get(dtype, "auto")
        elif weights in DENSE_FORMATS and DENSE_FORMATS[weights] != dtype:
            raise InvalidRequest(
                f"{weights} weights are dense {DENSE_FORMATS[weights]}; dtype {dtype!r} asks "
                "for another (leave dtype 'auto')"
            )
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "weights", weights)
        if self.attention not in ("auto", "kernels", "matmul"):
            raise InvalidRequest(
                f"attention must be 'auto', 'kernels' or 'matmul', got {self.attention!r}"
            )
        if self.dtype not in _DTYPES:
            raise InvalidRequest(
                f"dtype must be 'auto' or one of {sorted(_DTYPES)}, got {self.dtype!r}"
            )
        for name in ("block_size", "max_num_batched_tokens", "max_num_seqs"):
            if getattr(self, name) < 1:
                raise InvalidRequest(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_blocks is not None and self.num_blocks < 1:
            raise InvalidRequest(f"num_blocks must be >= 1 or None, got {self.num_blocks}")
        if self.kv_cache_gib <= 0:
            raise InvalidRequest(f"kv_cache_gib must be > 0, got {self.kv_cache_gib}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise InvalidRequest(f"max_model_len must be >= 2, got {self.max_model_len}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise InvalidRequest(f"max_new_tokens must be >= 1 or None, got {self.max_new_tokens}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    @property
    def format_key(self) -> str:
        """The dtype, or the quantized weights format: what a stored engine profile is keyed
        by besides the machine, model and threads."""
        if self.weights in DENSE_FORMATS:
            return self.dtype
        return (
            self.weights
            if ACTIVATIONS[self.weights] == self.dtype
            else f"{self.weights}-{self.dtype}"
        )
