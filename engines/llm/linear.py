"""Dense linear layers on the CPU: oneDNN's packed weights where it has a path for the dtype
(the model's dense weights and the quantized formats' dense copies, ``quant.py``)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def uses_packed_linear(device: torch.device, dtype: torch.dtype) -> bool:
    """oneDNN's packed linear: on the CPU, for float32, and for bfloat16 where oneDNN has a
    bfloat16 path on this CPU (AVX-512 BW/VL/DQ or AVX-NE-CONVERT; an AVX2-only CPU has none,
    and its packing raises), where torch has oneDNN."""
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return dtype == torch.float32


def pack_weight(w: torch.Tensor) -> torch.Tensor:
    """``w [out, in]`` reordered once into oneDNN's blocked layout (an opaque mkldnn tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(w.contiguous(), None)


def onednn_linear(
    x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``F.linear`` on a :func:`pack_weight` weight."""
    return torch.ops.mkldnn._linear_pointwise(x, w, bias, "none", [], "")


def dense_linear(w: torch.Tensor, dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x -> x @ w.T`` in ``dtype``: oneDNN-packed where the engine packs dense weights."""
    w = w.to(dtype).contiguous()
    if uses_packed_linear(w.device, dtype):
        packed = pack_weight(w)
        return lambda x: onednn_linear(x, packed)
    return lambda x: torch.nn.functional.linear(x, w)
