"""Validated configuration dataclasses: the model's shape and the engine's limits (sampling:
``sampling.py``)."""

from __future__ import annotations

import platform
from dataclasses import dataclass

import torch

from ..errors import InvalidRequest

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


def auto_dtype() -> str:
    """What ``dtype="auto"`` resolves to: ``"bfloat16"`` on a CPU with AMX bf16, else
    ``"float32"`` (the engine loads its weights on the CPU)."""
    return "bfloat16" if amx_bf16() else "float32"


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
        dtype: ``"float32"`` (fidelity: token-for-token equal to transformers), ``"bfloat16"``
            (fast mode: half the weight bytes per decode step) or ``"auto"``, resolved at
            construction by :func:`auto_dtype` (bfloat16 where the hardware runs it fast).
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

    dtype: str = "float32"
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

    def __post_init__(self) -> None:
        if self.dtype == "auto":
            object.__setattr__(self, "dtype", auto_dtype())
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
