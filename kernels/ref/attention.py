"""Paged attention in plain torch: the ground truth of the tests and the CPU path.

Written for CPU speed as well as clarity: K/V are gathered once per KV head into contiguous
``[B, L, D]`` (``index_select`` over whole blocks), which two batched matmuls read without
another copy; the whole query-head group of a KV head shares them (GQA); the softmax runs in
float32 whatever the input dtype. (SDPA on CPU is several times slower than this in bf16, and a
``cache[table]`` gather of all heads plus a transpose costs more than the model's own matmuls
at decode batch 64.)
"""

import torch


def _block_index(block_tables: torch.Tensor, used: torch.Tensor, nblocks: int) -> torch.Tensor:
    """Flat block ids ``[B * nblocks]`` (``used [B]``: blocks each sequence fills). Entries
    past a sequence's last block may point anywhere: they are sent to its first block, so every
    gathered slot holds data some model wrote (finite) and is then masked. Slots past a
    sequence's end inside its last block must hold finite values too, as every model-written
    cache does."""
    table = block_tables[:, :nblocks].long()
    cols = torch.arange(nblocks, device=table.device)
    return table.where(cols[None, :] < used[:, None], table[:, :1]).reshape(-1)


def _attend(q, k, v, mask, scale):
    """``q [N, M, D]`` x ``k, v [N, L, D]`` -> ``[N, M, D]``; ``mask [N or 1, M or 1, L]`` True
    where a position is hidden. Softmax in float32 (or wider)."""
    scores = torch.bmm(q, k.transpose(1, 2))
    scores = scores.to(torch.promote_types(scores.dtype, torch.float32)) * scale
    scores.masked_fill_(mask, float("-inf"))
    return torch.bmm(torch.softmax(scores, dim=-1).to(v.dtype), v)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    groups: int = 4,
) -> torch.Tensor:
    """One new query token per sequence against its whole cached context. Large batches are
    sorted by length and cut into ``groups`` groups, each padded only to its own longest."""
    batch = q.shape[0]
    if batch < 4 * groups or groups == 1:
        return _decode_group(q, k_cache, v_cache, block_tables, seq_lens, scale)
    order = torch.argsort(seq_lens)
    out = torch.empty_like(q)
    for idx in torch.tensor_split(order, groups):
        out[idx] = _decode_group(q[idx], k_cache, v_cache, block_tables[idx], seq_lens[idx], scale)
    return out


def _decode_group(q, k_cache, v_cache, block_tables, seq_lens, scale) -> torch.Tensor:
    batch, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    lens = seq_lens.to(q.device)
    nblocks = (int(lens.max()) + block_size - 1) // block_size
    index = _block_index(block_tables.to(q.device), (lens + block_size - 1) // block_size, nblocks)
    hidden = (torch.arange(nblocks * block_size, device=q.device)[None, :] >= lens[:, None])[
        :, None
    ]
    qg = q.view(batch, num_kv_heads, group, head_dim)
    out = torch.empty(batch, num_kv_heads, group, head_dim, dtype=q.dtype, device=q.device)
    span = (batch, nblocks * block_size, head_dim)
    for h in range(num_kv_heads):
        k = k_cache[:, :, h].index_select(0, index).view(span)
        v = v_cache[:, :, h].index_select(0, index).view(span)
        out[:, h] = _attend(qg[:, h], k, v, hidden, scale)
    return out.view(batch, num_heads, head_dim)


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    cu_q_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Causal attention of packed new tokens (their K/V already in the cache) over each
    sequence's cached prefix and themselves. Token i of sequence b sits at position
    ``seq_lens[b] - q_len_b + i``."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    out = torch.empty_like(q)
    cu = cu_q_lens.tolist()
    for b, length in enumerate(seq_lens.tolist()):
        start, end = cu[b], cu[b + 1]
        q_len = end - start
        if q_len == 0:
            continue
        blocks = block_tables[b, : (length + block_size - 1) // block_size].long()
        # [Hkv, L, D]: the sequence's keys and values, contiguous per head
        k = k_cache.index_select(0, blocks).flatten(0, 1)[:length].transpose(0, 1).contiguous()
        v = v_cache.index_select(0, blocks).flatten(0, 1)[:length].transpose(0, 1).contiguous()
        # queries of one KV head's group side by side: [Hkv, q_len * G, D]
        qg = q[start:end].view(q_len, num_kv_heads, group, head_dim).permute(1, 0, 2, 3)
        qg = qg.reshape(num_kv_heads, q_len * group, head_dim)
        qpos = torch.arange(length - q_len, length, device=q.device).repeat_interleave(group)
        hidden = torch.arange(length, device=q.device)[None, :] > qpos[:, None]  # [q_len*G, L]
        o = _attend(qg, k, v, hidden[None], scale)  # [Hkv, q_len * G, D]
        out[start:end] = (
            o.view(num_kv_heads, q_len, group, head_dim)
            .permute(1, 0, 2, 3)
            .reshape(q_len, num_heads, head_dim)
        )
    return out
