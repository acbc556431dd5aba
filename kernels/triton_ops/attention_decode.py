"""Paged decode attention, split-KV (flash-decoding): a small batch has too few (sequence, KV
head) pairs to fill a GPU, so each sequence's context is cut into up to ``num_splits`` parts
attended in parallel, each writing its partial output and log-sum-exp, and a second kernel
merges them. The number of parts comes from the block table's width (a bound on every length
known on the host), so choosing it syncs nothing with the device."""

import torch
import triton
import triton.language as tl

from .common import dot_in_fp32, pow2

BLOCK_N = 64  # tokens per tile
TARGET_PROGRAMS = 256  # about two per SM of a Hopper GPU: enough to fill it
MIN_DOT_GROUP = 8  # smaller GQA groups multiply elementwise instead of padding tl.dot to 16


@triton.jit
def _decode_split_kernel(
    q_ptr, kc_ptr, vc_ptr, bt_ptr, len_ptr, out_ptr, lse_ptr,
    q_s0, q_s1, o_s0, o_s1, o_s2, l_s0, l_s1, bt_s0, c_s0, c_s1, c_s2,
    scale, group, head_dim, block_size, partition,
    GROUP_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    FP32_DOT: tl.constexpr, USE_DOT: tl.constexpr, WRITE_LSE: tl.constexpr,
):  # fmt: skip
    """One program per (sequence, KV head, part of the context): the KV head's query-head group
    reads each K/V tile of the part once (GQA sharing); online softmax over BLOCK_N-token tiles.
    Writes the part's normalized output and, when the parts are merged, its log-sum-exp
    (-inf for a part past the sequence's end, whose output is 0)."""
    b = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1).to(tl.int64)
    part = tl.program_id(2).to(tl.int64)
    length = tl.load(len_ptr + b).to(tl.int64)
    start = part * partition
    end = tl.minimum(start + partition, length)
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
    if FP32_DOT or not USE_DOT:
        q = q.to(tl.float32)
    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    denom = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, BLOCK_D], tl.float32)
    for tile in range(start, end, BLOCK_N):
        n = tile + tl.arange(0, BLOCK_N)
        nmask = n < end
        block = tl.load(bt_ptr + b * bt_s0 + n // block_size, mask=nmask, other=0).to(tl.int64)
        base = block * c_s0 + (n % block_size) * c_s1 + kvh * c_s2
        kv_mask = nmask[:, None] & dmask[None, :]
        k = tl.load(kc_ptr + base[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(vc_ptr + base[:, None] + d[None, :], mask=kv_mask, other=0.0)
        if not USE_DOT:  # a small group: [G, 1, D] x [1, N, D], reduced over D
            k = k.to(tl.float32)
            v = v.to(tl.float32)
            s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale
        elif FP32_DOT:
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
        if not USE_DOT:
            pv = tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        elif FP32_DOT:
            pv = tl.dot(p, v, input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m = m_new
    seen = denom > 0  # an empty part (past the end, or a sequence of length 0) saw nothing
    out = acc / tl.where(seen, denom, 1.0)[:, None]
    tl.store(
        out_ptr + b * o_s0 + heads[:, None] * o_s1 + part * o_s2 + d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=gmask[:, None] & dmask[None, :],
    )
    if WRITE_LSE:
        lse = tl.where(seen, m + tl.log(tl.where(seen, denom, 1.0)), float("-inf"))
        tl.store(lse_ptr + b * l_s0 + heads * l_s1 + part, lse, mask=gmask)


@triton.jit
def _merge_kernel(
    part_ptr, lse_ptr, out_ptr,
    p_s0, p_s1, p_s2, l_s0, l_s1, o_s0, o_s1,
    num_parts, head_dim,
    PARTS_PAD: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """One program per (sequence, query head): the parts' outputs weighted by their share of
    the softmax mass, ``exp(lse_i - max lse)``; a sequence with no part seen gets 0."""
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    i = tl.arange(0, PARTS_PAD)
    d = tl.arange(0, BLOCK_D)
    imask = i < num_parts
    dmask = d < head_dim
    lse = tl.load(lse_ptr + b * l_s0 + h * l_s1 + i, mask=imask, other=float("-inf"))
    top = tl.max(lse, axis=0)
    top = tl.where(top == float("-inf"), 0.0, top)
    w = tl.exp(lse - top)  # 0 for empty parts
    total = tl.sum(w, axis=0)
    parts = tl.load(
        part_ptr + b * p_s0 + h * p_s1 + i[:, None] * p_s2 + d[None, :],
        mask=imask[:, None] & dmask[None, :],
        other=0.0,
    )
    out = tl.sum(parts * w[:, None], axis=0) / tl.where(total > 0, total, 1.0)
    tl.store(out_ptr + b * o_s0 + h * o_s1 + d, out.to(out_ptr.dtype.element_ty), mask=dmask)


def num_parts(batch: int, num_kv_heads: int, max_len: int) -> int:
    """How many parts each context is cut into: enough (sequence, KV head, part) programs to
    fill the GPU, and no part shorter than a tile."""
    tiles = triton.cdiv(max(max_len, 1), BLOCK_N)
    return max(1, min(tiles, triton.cdiv(TARGET_PROGRAMS, max(batch * num_kv_heads, 1))))


def paged_decode_attention(
    q, k_cache, v_cache, block_tables, seq_lens, scale, *, parts: int | None = None
):
    """``parts``: the number of parts (default: :func:`num_parts` of the block table's width,
    a bound on every sequence's length)."""
    batch, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    if q.stride(2) != 1:
        q = q.contiguous()
    out = torch.empty_like(q)
    if batch == 0:
        return out
    group = num_heads // num_kv_heads
    bound = block_tables.shape[1] * block_size
    if parts is None:
        parts = num_parts(batch, num_kv_heads, bound)
    partition = triton.cdiv(triton.cdiv(bound, parts), BLOCK_N) * BLOCK_N
    use_dot = group >= MIN_DOT_GROUP
    consts = dict(
        GROUP_PAD=pow2(group, 16) if use_dot else pow2(group),
        BLOCK_N=BLOCK_N,
        BLOCK_D=pow2(head_dim, 16),
        FP32_DOT=dot_in_fp32(q.dtype),
        USE_DOT=use_dot,
    )
    common = (
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        scale, group, head_dim, block_size, partition,
    )  # fmt: skip
    grid = (batch, num_kv_heads, parts)
    if parts == 1:  # one part: its output is the answer
        _decode_split_kernel[grid](
            q, k_cache, v_cache, block_tables, seq_lens, out, out,
            q.stride(0), q.stride(1), out.stride(0), out.stride(1), 0, 0, 0,
            block_tables.stride(0), *common, WRITE_LSE=False, **consts,
        )  # fmt: skip
        return out
    partial = torch.empty(batch, num_heads, parts, head_dim, dtype=torch.float32, device=q.device)
    lse = torch.empty(batch, num_heads, parts, dtype=torch.float32, device=q.device)
    _decode_split_kernel[grid](
        q, k_cache, v_cache, block_tables, seq_lens, partial, lse,
        q.stride(0), q.stride(1), partial.stride(0), partial.stride(1), partial.stride(2),
        lse.stride(0), lse.stride(1), block_tables.stride(0), *common, WRITE_LSE=True, **consts,
    )  # fmt: skip
    _merge_kernel[(batch, num_heads)](
        partial, lse, out,
        partial.stride(0), partial.stride(1), partial.stride(2), lse.stride(0), lse.stride(1),
        out.stride(0), out.stride(1), parts, head_dim,
        PARTS_PAD=pow2(parts), BLOCK_D=pow2(head_dim, 16),
    )  # fmt: skip
    return out
