import torch
import triton
import triton.language as tl

from .common import pow2, rows


@triton.jit
def _rms_norm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, sum_ptr,
    x_stride, res_stride, out_stride, sum_stride,
    hidden, eps,
    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        # Add in fp32 and round once, as torch does for half types (and the interpreter has no
        # bf16 arithmetic).
        r = tl.load(res_ptr + row * res_stride + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
        tl.store(sum_ptr + row * sum_stride + cols, x, mask=mask)
    xf = x.to(tl.float32)
    inv = tl.rsqrt(tl.sum(xf * xf, axis=0) / hidden + eps)
    y = (xf * inv).to(x.dtype).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_stride + cols, (w * y).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps, residual=None):
    """One program per row; reads x (+ residual) and weight once, writes out (+ the sum)."""
    shape, hidden = x.shape, x.shape[-1]
    x2 = rows(x)
    out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    res2 = rows(residual) if residual is not None else x2
    total = torch.empty_like(out) if residual is not None else out
    block = pow2(hidden, 16)
    _rms_norm_kernel[(x2.shape[0],)](
        x2, res2, weight, out, total,
        x2.stride(0), res2.stride(0), out.stride(0), total.stride(0),
        hidden, eps,
        HAS_RESIDUAL=residual is not None, BLOCK=block, num_warps=min(16, max(1, block // 256)),
    )  # fmt: skip
    if residual is None:
        return out.view(shape)
    return out.view(shape), total.view(shape)
