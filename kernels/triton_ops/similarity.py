import torch
import triton
import triton.language as tl

from .common import dot_in_fp32, pow2


@triton.jit
def _topk_tile_kernel(
    q_ptr, k_ptr, score_ptr, id_ptr,
    num_q, num_k, dim,
    q_s0, k_s0, out_s0,
    K: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    FP32_DOT: tl.constexpr,
):  # fmt: skip
    """Scores of BLOCK_Q queries against one BLOCK_N tile of keys, reduced in registers to the
    tile's top K (K rounds of max + mask). The full score matrix is never written."""
    qi = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    tile = tl.program_id(1)
    nj = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_Q, BLOCK_N], tl.float32)
    for start in range(0, dim, BLOCK_D):
        d = start + tl.arange(0, BLOCK_D)
        q = tl.load(
            q_ptr + qi[:, None].to(tl.int64) * q_s0 + d[None, :],
            mask=(qi[:, None] < num_q) & (d[None, :] < dim),
            other=0.0,
        )
        k = tl.load(
            k_ptr + nj[:, None].to(tl.int64) * k_s0 + d[None, :],
            mask=(nj[:, None] < num_k) & (d[None, :] < dim),
            other=0.0,
        )
        if FP32_DOT:
            acc += tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
        else:
            acc += tl.dot(q, tl.trans(k))
    s = tl.where(nj[None, :] < num_k, acc, float("-inf"))
    out = qi.to(tl.int64) * out_s0 + tile * K
    for r in tl.static_range(K):
        best = tl.max(s, axis=1)
        idx = tl.argmax(s, axis=1)
        tl.store(score_ptr + out + r, best, mask=qi < num_q)
        tl.store(id_ptr + out + r, tile * BLOCK_N + idx, mask=qi < num_q)
        s = tl.where(tl.arange(0, BLOCK_N)[None, :] == idx[:, None], float("-inf"), s)


def similarity_topk(queries, keys, k):
    num_q, dim = queries.shape
    num_k = keys.shape[0]
    k = min(k, num_k)
    if k > 64:  # the in-register selection unrolls k rounds: past that, matmul + topk wins
        top = torch.topk(queries.float() @ keys.float().T, k, dim=1)
        return top.values, top.indices
    if queries.stride(1) != 1:
        queries = queries.contiguous()
    if keys.stride(1) != 1:
        keys = keys.contiguous()
    block_n = pow2(k, 64)
    block_q = 16
    tiles = triton.cdiv(num_k, block_n)
    scores = torch.empty(num_q, tiles * k, dtype=torch.float32, device=queries.device)
    ids = torch.empty(num_q, tiles * k, dtype=torch.int64, device=queries.device)
    _topk_tile_kernel[(triton.cdiv(num_q, block_q), tiles)](
        queries, keys, scores, ids,
        num_q, num_k, dim,
        queries.stride(0), keys.stride(0), scores.stride(0),
        K=k, BLOCK_Q=block_q, BLOCK_N=block_n, BLOCK_D=min(pow2(dim, 16), 64),
        FP32_DOT=dot_in_fp32(queries.dtype),
    )  # fmt: skip
    top = torch.topk(scores, k, dim=1)
    return top.values, ids.gather(1, top.indices)
