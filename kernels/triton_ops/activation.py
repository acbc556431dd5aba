import torch
import triton
import triton.language as tl

from .common import rows


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, x_stride, out_stride, d, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    gate = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0)
    up = tl.load(x_ptr + row * x_stride + d + cols, mask=mask, other=0.0)
    g = gate.to(tl.float32)
    act = (g / (1.0 + tl.exp(-g))).to(gate.dtype)
    out = act.to(tl.float32) * up.to(tl.float32)
    tl.store(out_ptr + row * out_stride + cols, out.to(gate.dtype), mask=mask)


def silu_and_mul(x):
    d = x.shape[-1] // 2
    x2 = rows(x)
    out = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
    block = 1024
    _silu_and_mul_kernel[(x2.shape[0], triton.cdiv(d, block))](
        x2, out, x2.stride(0), out.stride(0), d, BLOCK=block
    )
    return out.view(*x.shape[:-1], d)
