"""Ayo's compute kernels: torch references, Triton kernels, FlashInfer calls, one API.

``from ayo.kernels import rms_norm, paged_decode_attention, ...``; each takes ``backend=``
(``None`` = best available for the tensors' device). See :mod:`ayo.kernels.api` for shapes.
"""

from .api import (
    apply_rotary,
    apply_token_bitmask,
    implementation,
    paged_decode_attention,
    paged_prefill_attention,
    rms_norm,
    rotary_cos_sin_cache,
    sample,
    silu_and_mul,
    similarity_topk,
    write_kv_cache,
)
from .backend import BACKENDS, BackendUnavailable, available_backends

__all__ = [
    "BACKENDS",
    "BackendUnavailable",
    "apply_rotary",
    "apply_token_bitmask",
    "available_backends",
    "implementation",
    "paged_decode_attention",
    "paged_prefill_attention",
    "rms_norm",
    "rotary_cos_sin_cache",
    "sample",
    "silu_and_mul",
    "similarity_topk",
    "write_kv_cache",
]
