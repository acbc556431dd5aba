import torch
import torch.nn.functional as F


def _gather(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """The first ``length`` cached positions of one sequence: ``[length, Hkv, D]``."""
    block_size = cache.shape[1]
    blocks = block_table[: (length + block_size - 1) // block_size].long()
    return cache.index_select(0, blocks).flatten(0, 1)[:length]


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One new query token per sequence against its whole cached context.

    Pads every sequence to the longest one and masks, so a batch is a few large ops.
    """
    batch, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    max_len = int(seq_lens.max())
    nblocks = (max_len + block_size - 1) // block_size
    lens = seq_lens.to(q.device).long()
    # Table entries past a sequence's last block may point anywhere: send them to its first
    # block, so every gathered slot holds finite data (masked below). Slots past a sequence's
    # end inside its last block must hold finite values, as any cache a model wrote does.
    used = (lens + block_size - 1) // block_size
    cols = torch.arange(nblocks, device=q.device)
    table = block_tables[:, :nblocks].long()
    table = torch.where(cols[None, :] < used[:, None], table, table[:, :1])
    gathered = (batch, nblocks * block_size, num_kv_heads, head_dim)
    k = k_cache.index_select(0, table.flatten()).view(gathered)[:, :max_len].transpose(1, 2)
    v = v_cache.index_select(0, table.flatten()).view(gathered)[:, :max_len].transpose(1, 2)
    mask = (torch.arange(max_len, device=q.device)[None, :] < lens[:, None])[:, None, None, :]
    out = F.scaled_dot_product_attention(
        q[:, :, None, :],
        k,
        v,
        attn_mask=mask,
        scale=scale,
        enable_gqa=num_heads != num_kv_heads,
    )
    return out[:, :, 0, :].reshape(batch, num_heads, head_dim)


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
    num_heads, num_kv_heads = q.shape[1], k_cache.shape[2]
    out = torch.empty_like(q)
    cu = cu_q_lens.tolist()
    lens = seq_lens.tolist()
    for b, length in enumerate(lens):
        start, end = cu[b], cu[b + 1]
        if end == start:
            continue
        q_len = end - start
        k = _gather(k_cache, block_tables[b], length).transpose(0, 1)[None]  # [1, Hkv, L, D]
        v = _gather(v_cache, block_tables[b], length).transpose(0, 1)[None]
        qb = q[start:end].transpose(0, 1)[None]  # [1, Hq, q_len, D]; 4-D picks SDPA's fast path
        gqa = num_heads != num_kv_heads
        if q_len == length:  # nothing cached before: plain causal
            o = F.scaled_dot_product_attention(
                qb, k, v, is_causal=True, scale=scale, enable_gqa=gqa
            )
        else:
            qpos = torch.arange(length - q_len, length, device=q.device)
            mask = torch.arange(length, device=q.device)[None, :] <= qpos[:, None]  # [q_len, L]
            o = F.scaled_dot_product_attention(
                qb, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa
            )
        o = o[0]
        out[start:end] = o.transpose(0, 1)
    return out
