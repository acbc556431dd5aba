"""Builds scattered paged KV caches for the attention tests."""

from dataclasses import dataclass

import torch


@dataclass
class PagedBatch:
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # [B, max_blocks] int32
    seq_lens: torch.Tensor  # [B] int32


def make_paged(
    seq_lens: list[int],
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device,
) -> PagedBatch:
    """Random K/V for each sequence in randomly permuted blocks. Unused blocks hold NaN and the
    unused tail of each sequence's last block holds 1e4 (finite, as a model-written cache
    always is), so a kernel that reads a wrong block, or past a sequence's end without
    masking it, visibly corrupts its output."""
    per_seq = [(n + block_size - 1) // block_size for n in seq_lens]
    num_blocks = sum(per_seq) + 3
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype, device=device)
    v_cache = torch.full(shape, float("nan"), dtype=dtype, device=device)
    order = torch.randperm(num_blocks).tolist()
    width = max(per_seq) + 2
    tables = torch.full((len(seq_lens), width), num_blocks - 1, dtype=torch.int32)
    used = 0
    for b, (length, count) in enumerate(zip(seq_lens, per_seq)):
        blocks = order[used : used + count]
        used += count
        tables[b, :count] = torch.tensor(blocks, dtype=torch.int32)
        k_cache[blocks[-1]] = 1e4
        v_cache[blocks[-1]] = 1e4
        for i in range(length):
            blk, off = blocks[i // block_size], i % block_size
            k_cache[blk, off] = torch.randn(num_kv_heads, head_dim, device=device).to(dtype)
            v_cache[blk, off] = torch.randn(num_kv_heads, head_dim, device=device).to(dtype)
    spare = order[used:]
    tables[:, -1] = spare[0]  # a NaN block past every sequence's end
    return PagedBatch(
        k_cache,
        v_cache,
        tables.to(device),
        torch.tensor(seq_lens, dtype=torch.int32, device=device),
    )
