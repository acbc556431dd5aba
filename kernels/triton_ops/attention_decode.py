import torch
import triton
import triton.language as tl

from .common import dot_in_fp32, pow2


@triton.jit
def _decode_kernel(
    q_ptr, kc_ptr, vc_ptr, bt_ptr, len_ptr, out_ptr,
    q_s0, q_s1, o_s0, o_s1, bt_s0, c_s0, c_s1, c_s2,
    scale, group, head_dim, block_size,
    GROUP_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, FP32_DOT: tl.constexpr,
):  # fmt: skip
    """One program per (sequence, KV head): the whole query-head group of that KV head reads
    each cached K/V tile once (GQA sharing); online softmax over BLOCK_N-token tiles."""
    b = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1).to(tl.int64)
    length = tl.load(len_ptr + b)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, BLOCK_D)
    gmask = g < group
    dmask = d < head_dim
    heads = kvh * group + g
    q = tl.load(
        q_ptr + b * q_s0 + heads[:, None] * q_s1 + d[None, :],
        mask=gmask[:, None] & dmask[None, :],
        other=0.0,
    )
    if FP32_DOT:
        q = q.to(tl.float32)
    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    denom = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, BLOCK_D], tl.float32)
    for start in range(0, length, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        nmask = n < length
        block = tl.load(bt_ptr + b * bt_s0 + n // block_size, mask=nmask, other=0).to(tl.int64)
        base = block * c_s0 + (n % block_size) * c_s1 + kvh * c_s2
        kv_mask = nmask[:, None] & dmask[None, :]
        k = tl.load(kc_ptr + base[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(vc_ptr + base[:, None] + d[None, :], mask=kv_mask, other=0.0)
        if FP32_DOT:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        else:
            s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(nmask[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        denom = denom * alpha + tl.sum(p, axis=1)
        if FP32_DOT:
            pv = tl.dot(p, v, input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m = m_new
    out = acc / denom[:, None]
    tl.store(
        out_ptr + b * o_s0 + heads[:, None] * o_s1 + d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=gmask[:, None] & dmask[None, :],
    )


def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale):
    batch, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    if q.stride(2) != 1:
        q = q.contiguous()
    out = torch.empty_like(q)
    if batch == 0:
        return out
    group = num_heads // num_kv_heads
    _decode_kernel[(batch, num_kv_heads)](
        q, k_cache, v_cache, block_tables, seq_lens, out,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), block_tables.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        scale, group, head_dim, block_size,
        GROUP_PAD=pow2(group, 16), BLOCK_N=64, BLOCK_D=pow2(head_dim, 16),
        FP32_DOT=dot_in_fp32(q.dtype),
    )  # fmt: skip
    return out
