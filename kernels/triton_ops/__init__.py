"""Triton kernels behind the :mod:`ayo.kernels` API (GPU; CPU only under TRITON_INTERPRET=1).

Each module pairs ``@triton.jit`` code with a host wrapper that checks strides and picks block
sizes. Imported lazily by :func:`ayo.kernels.api._impl`.
"""

from .activation import silu_and_mul
from .attention_decode import paged_decode_attention
from .attention_prefill import paged_prefill_attention
from .kv_cache import write_kv_cache
from .norm import rms_norm
from .rotary import apply_rotary
from .sampling import apply_token_bitmask, sample
from .similarity import similarity_topk

__all__ = [
    "apply_rotary",
    "apply_token_bitmask",
    "paged_decode_attention",
    "paged_prefill_attention",
    "rms_norm",
    "sample",
    "silu_and_mul",
    "similarity_topk",
    "write_kv_cache",
]
