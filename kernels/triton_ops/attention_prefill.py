import torch
import triton
import triton.language as tl

from .common import dot_in_fp32, pow2


@triton.jit
def _prefill_kernel(
    q_ptr, kc_ptr, vc_ptr, bt_ptr, cu_ptr, len_ptr, out_ptr,
    q_s0, q_s1, o_s0, o_s1, bt_s0, c_s0, c_s1, c_s2,
    scale, group, head_dim, block_size,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, FP32_DOT: tl.constexpr,
):  # fmt: skip
    """One program per (sequence, query head, tile of BLOCK_M new tokens). New token i sits at
    position ``length - q_len + i`` and sees cached positions up to its own (causal)."""
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    tile = tl.program_id(2)
    q_start = tl.load(cu_ptr + b).to(tl.int64)
    q_len = tl.load(cu_ptr + b + 1).to(tl.int64) - q_start
    length = tl.load(len_ptr + b).to(tl.int64)
    kvh = h // group
    i = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    imask = i < q_len
    dmask = d < head_dim
    qpos = length - q_len + i
    q = tl.load(
        q_ptr + (q_start + i)[:, None] * q_s0 + h * q_s1 + d[None, :],
        mask=imask[:, None] & dmask[None, :],
        other=0.0,
    )
    if FP32_DOT:
        q = q.to(tl.float32)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    # Keys past the tile's last query position are never seen; an empty tile loops 0 times.
    end = tl.minimum(length, length - q_len + (tile + 1) * BLOCK_M)
    end = tl.where(tile * BLOCK_M < q_len, end, 0)
    for start in range(0, end, BLOCK_N):
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
        visible = nmask[None, :] & (n[None, :] <= qpos[:, None])
        s = tl.where(visible, s, float("-inf"))
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
    out = acc / tl.where(denom > 0, denom, 1.0)[:, None]  # rows past q_len saw nothing
    tl.store(
        out_ptr + (q_start + i)[:, None] * o_s0 + h * o_s1 + d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=imask[:, None] & dmask[None, :],
    )


def paged_prefill_attention(
    q, k_cache, v_cache, block_tables, cu_q_lens, seq_lens, scale, *, max_q_len: int | None = None
):
    """``max_q_len``: the longest chunk, as the host's scheduler knows it; without it the
    number of tokens bounds it, so the grid is sized without reading ``cu_q_lens`` back from
    the device (tiles past a chunk's end return at once)."""
    tokens, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    if q.stride(2) != 1:
        q = q.contiguous()
    out = torch.empty_like(q)
    batch = seq_lens.shape[0]
    if tokens == 0 or batch == 0:
        return out
    max_q = tokens if max_q_len is None else max_q_len
    block_m = 64 if max_q > 32 else pow2(max_q, 16)
    grid = (batch, num_heads, triton.cdiv(max_q, block_m))
    _prefill_kernel[grid](
        q, k_cache, v_cache, block_tables, cu_q_lens, seq_lens, out,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), block_tables.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        scale, num_heads // num_kv_heads, head_dim, block_size,
        BLOCK_M=block_m, BLOCK_N=64, BLOCK_D=pow2(head_dim, 16), FP32_DOT=dot_in_fp32(q.dtype),
    )  # fmt: skip
    return out
