"""Validated configuration dataclasses: the model's shape, the engine's limits, sampling."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field

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

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]


@dataclass(frozen=True)
class SamplingParams:
    """How to decode: ``temperature`` 0 is greedy; ``top_k`` 0 and ``top_p`` 1 keep everything;
    ``seed`` makes a sampled decode reproducible; generation stops at ``max_tokens``, at the
    model's end-of-sequence token (unless ``ignore_eos``) or when the text contains a ``stop``
    string (the string itself is left out of the text).

    Penalties, applied to the logits before sampling (greedy included): ``repetition_penalty``
    as transformers' ``RepetitionPenaltyLogitsProcessor`` (every token of the prompt and the
    output so far: a positive logit divided by it, a negative one multiplied; 1 is off);
    ``frequency_penalty`` and ``presence_penalty`` as OpenAI's API (over the output tokens:
    ``logit -= frequency * count + presence * (count > 0)``; 0 is off).
    """

    max_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)
    ignore_eos: bool = False
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        # Written so that NaN fails every check (it compares false with everything).
        if not _is_int(self.max_tokens) or not self.max_tokens >= 1:
            raise InvalidRequest(f"max_tokens must be an integer >= 1, got {self.max_tokens}")
        if not 0 <= self.temperature <= MAX_TEMPERATURE:
            raise InvalidRequest(
                f"temperature must be in [0, {MAX_TEMPERATURE}] (0 = greedy), got {self.temperature}"
            )
        if not _is_int(self.top_k) or not self.top_k >= 0:
            raise InvalidRequest(f"top_k must be an integer >= 0 (0 keeps all), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise InvalidRequest(f"top_p must be in (0, 1], got {self.top_p}")
        # A top_p below float32's range would round to 0 in the sampler; any tiny top_p keeps
        # exactly the likeliest token, as this one does.
        object.__setattr__(self, "top_p", max(float(self.top_p), MIN_TOP_P))
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed < 2**63):
            raise InvalidRequest(f"seed must be an integer in [0, 2**63), got {self.seed}")
        if not 0 < self.repetition_penalty <= MAX_PENALTY:
            raise InvalidRequest(
                f"repetition_penalty must be in (0, {MAX_PENALTY}] (1 = off), got "
                f"{self.repetition_penalty}"
            )
        for name in ("frequency_penalty", "presence_penalty"):
            if not -2 <= getattr(self, name) <= 2:
                raise InvalidRequest(
                    f"{name} must be in [-2, 2] (0 = off), got {getattr(self, name)}"
                )
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise InvalidRequest("stop strings must be non-empty strings")

    @property
    def penalized(self) -> bool:
        return (
            self.repetition_penalty != 1.0
            or self.frequency_penalty != 0.0
            or self.presence_penalty != 0.0
        )


MAX_TEMPERATURE = 2.0
MIN_TOP_P = 1e-9
MAX_PENALTY = 2.0


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
