"""FlashInfer calls behind the :mod:`ayo.kernels` API (CUDA only; imported lazily).

FlashInfer has no slot-mapped KV write (its append takes batch indices and positions) and no
inner-product top-k, so those two ops have no FlashInfer entry. Attention converts our block
tables to FlashInfer's CSR page tables (``indptr``, ``indices``, ``last_page_len``) and plans
on every call; an engine that calls once per layer should plan once per step instead.
"""

from __future__ import annotations

import functools

import flashinfer
import torch


@functools.cache
def _workspace(device: torch.device) -> torch.Tensor:
    return torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device=device)


def _csr_pages(block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int):
    lens = seq_lens.to(torch.int32)
    pages = (lens + block_size - 1) // block_size
    indptr = torch.zeros(lens.shape[0] + 1, dtype=torch.int32, device=lens.device)
    indptr[1:] = torch.cumsum(pages, 0)
    width = torch.arange(block_tables.shape[1], device=lens.device)
    indices = block_tables[width[None, :] < pages[:, None]].to(torch.int32)
    last = lens - (pages - 1) * block_size
    return indptr, indices, last


def rms_norm(x, weight, eps, residual=None):
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    if residual is None:
        return flashinfer.norm.rmsnorm(x2.contiguous(), weight, eps).view(shape)
    out = x2.clone()
    total = residual.reshape(-1, shape[-1]).clone()
    flashinfer.norm.fused_add_rmsnorm(out, total, weight, eps)  # total += out; out = norm(total)
    return out.view(shape), total.view(shape)


def apply_rotary(q, k, positions, cos_sin_cache):
    if not (q.is_contiguous() and k.is_contiguous()):
        raise ValueError("apply_rotary(flashinfer) works in place on contiguous q and k")
    flashinfer.rope.apply_rope_with_cos_sin_cache_inplace(
        positions=positions.long(),
        query=q.view(q.shape[0], -1),
        key=k.view(k.shape[0], -1),
        head_size=q.shape[2],
        cos_sin_cache=cos_sin_cache.float(),
        is_neox=True,
    )
    return q, k


def silu_and_mul(x):
    return flashinfer.activation.silu_and_mul(x.contiguous())


def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale):
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    indptr, indices, last = _csr_pages(block_tables, seq_lens, block_size)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        _workspace(q.device), "NHD", use_tensor_cores=q.shape[1] // num_kv_heads >= 4
    )
    wrapper.plan(
        indptr,
        indices,
        last,
        q.shape[1],
        num_kv_heads,
        q.shape[2],
        block_size,
        q_data_type=q.dtype,
        kv_data_type=k_cache.dtype,
        sm_scale=scale,
    )
    return wrapper.run(q.contiguous(), (k_cache, v_cache))


def paged_prefill_attention(q, k_cache, v_cache, block_tables, cu_q_lens, seq_lens, scale):
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    indptr, indices, last = _csr_pages(block_tables, seq_lens, block_size)
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(_workspace(q.device), "NHD")
    wrapper.plan(
        cu_q_lens.to(torch.int32),
        indptr,
        indices,
        last,
        q.shape[1],
        num_kv_heads,
        q.shape[2],
        block_size,
        causal=True,  # FlashInfer aligns the new tokens to the end of the KV: as ours
        sm_scale=scale,
        q_data_type=q.dtype,
        kv_data_type=k_cache.dtype,
    )
    return wrapper.run(q.contiguous(), (k_cache, v_cache))


def sample(logits, temperature, top_k, top_p, generator):
    vocab = logits.shape[1]
    greedy = temperature <= 0
    temp = torch.where(greedy, torch.ones_like(temperature), temperature)
    k = torch.where((top_k > 0) & (top_k < vocab), top_k, torch.full_like(top_k, vocab))
    drawn = flashinfer.sampling.top_k_top_p_sampling_from_logits(
        logits.float() / temp[:, None],
        k.to(torch.int32),
        top_p.float(),
        filter_apply_order="top_k_first",
        generator=generator,
    )
    return torch.where(greedy, logits.argmax(dim=1), drawn.long())
