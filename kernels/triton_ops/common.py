"""Helpers shared by the Triton host wrappers."""

import torch
import triton

from ..backend import triton_interpreted


def pow2(n: int, minimum: int = 1) -> int:
    return max(minimum, triton.next_power_of_2(int(n)))


def dot_in_fp32(dtype: torch.dtype) -> bool:
    """Whether ``tl.dot`` operands must be upcast: always for fp32 inputs (exact, no tf32), and
    under the interpreter, whose bf16 dot multiplies raw bits (triton-lang/triton#11584)."""
    return dtype == torch.float32 or triton_interpreted()


def rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``[rows, last]`` with a unit last stride (copying only when it must)."""
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()
