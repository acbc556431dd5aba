import triton
import triton.language as tl

from .common import pow2


@triton.jit
def _rotate(ptr, t, s0, s1, heads, cos, sin, half, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
    h = tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_HALF)
    mask = (h[:, None] < heads) & (d[None, :] < half)
    p1 = ptr + t * s0 + h[:, None] * s1 + d[None, :]
    x1 = tl.load(p1, mask=mask, other=0.0)
    x2 = tl.load(p1 + half, mask=mask, other=0.0)
    c = cos.to(x1.dtype).to(tl.float32)[None, :]
    s = sin.to(x1.dtype).to(tl.float32)[None, :]
    a, b = x1.to(tl.float32), x2.to(tl.float32)
    tl.store(p1, (a * c - b * s).to(x1.dtype), mask=mask)
    tl.store(p1 + half, (b * c + a * s).to(x1.dtype), mask=mask)


@triton.jit
def _rotary_kernel(
    q_ptr, k_ptr, pos_ptr, cache_ptr,
    q_s0, q_s1, k_s0, k_s1, cache_s0,
    q_heads, k_heads, half,
    BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr, BLOCK_HALF: tl.constexpr,
):  # fmt: skip
    t = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    d = tl.arange(0, BLOCK_HALF)
    cos = tl.load(cache_ptr + pos * cache_s0 + d, mask=d < half, other=0.0)
    sin = tl.load(cache_ptr + pos * cache_s0 + half + d, mask=d < half, other=0.0)
    _rotate(q_ptr, t, q_s0, q_s1, q_heads, cos, sin, half, BLOCK_HQ, BLOCK_HALF)
    _rotate(k_ptr, t, k_s0, k_s1, k_heads, cos, sin, half, BLOCK_HK, BLOCK_HALF)


def apply_rotary(q, k, positions, cos_sin_cache):
    """In place; one program per token rotates all its query and key heads."""
    if q.stride(2) != 1 or k.stride(2) != 1 or cos_sin_cache.stride(1) != 1:
        raise ValueError("apply_rotary(triton) needs a unit stride on the head dim, in place")
    if q.shape[0] == 0:
        return q, k
    half = q.shape[2] // 2
    _rotary_kernel[(q.shape[0],)](
        q, k, positions, cos_sin_cache,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), cos_sin_cache.stride(0),
        q.shape[1], k.shape[1], half,
        BLOCK_HQ=pow2(q.shape[1]), BLOCK_HK=pow2(k.shape[1]), BLOCK_HALF=pow2(half),
    )  # fmt: skip
    return q, k
