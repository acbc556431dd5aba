"""Attention backends of the model: the ``ayo.kernels`` paged kernels, or a CPU bf16 fast path.

Why a CPU path here: on this CPU the kernels' torch reference is the bottleneck of a decode step.
Its ``scaled_dot_product_attention`` in bfloat16 is 5-6x slower than two batched matmuls (batch
64, 400 positions: 46 ms vs 8 ms per layer), and its gather of whole padded blocks
(``k_cache[table]`` then a transpose) costs more than the model's matmuls at batch 64 in float32.
This path gathers per KV head (contiguous ``[B, L, D]``, read by ``bmm`` without another copy),
scales q before the product (exact for power-of-two scales such as 64**-0.5) and takes the
softmax in the cache dtype (torch accumulates a bf16 softmax in float32; the scores are bf16
products either way). It is token-for-token equal to transformers in float32 (the tests run
both backends). Reported in /work/notes/kernel-requests.md.
"""

from __future__ import annotations

import torch

from ayo import kernels


def _gather(cache: torch.Tensor, table: torch.Tensor, length: int) -> torch.Tensor:
    """``[B, length, Hkv, D]`` of the paged ``cache`` through ``table [B, M]``."""
    bs = cache.shape[1]
    n = (length + bs - 1) // bs
    return cache[table[:, :n].long()].flatten(1, 2)[:, :length]


def decode_matmul(
    q, k_cache, v_cache, block_tables, seq_lens, scale, groups: int = 4
) -> torch.Tensor:
    """Same contract as ``kernels.paged_decode_attention``: ``q [B, Hq, D]`` -> ``[B, Hq, D]``.

    Sequences are sorted by length and split into up to ``groups`` groups, each padded only to
    its own longest: with mixed lengths that gathers and multiplies about a third less.
    """
    b = q.shape[0]
    if b < 4 * groups:
        return _decode_group(q, k_cache, v_cache, block_tables, seq_lens, scale)
    order = torch.argsort(seq_lens)
    out = torch.empty_like(q)
    for idx in torch.tensor_split(order, groups):
        out[idx] = _decode_group(q[idx], k_cache, v_cache, block_tables[idx], seq_lens[idx], scale)
    return out


def _decode_group(q, k_cache, v_cache, block_tables, seq_lens, scale) -> torch.Tensor:
    """Per KV head the gathered ``[B, L, D]`` is contiguous, so both batched matmuls read it
    without another copy (K through a transposed view)."""
    b, hq, d = q.shape
    bs, hkv = k_cache.shape[1], k_cache.shape[2]
    g = hq // hkv
    length = int(seq_lens.max())
    nblocks = (length + bs - 1) // bs
    index = block_tables[:, :nblocks].reshape(-1).long()
    pad = (torch.arange(nblocks * bs)[None, :] >= seq_lens[:, None])[:, None, :]  # [B, 1, L']
    out = torch.empty(b, hkv, g, d, dtype=q.dtype)
    qg = (q * scale).view(b, hkv, g, d)
    for h in range(hkv):
        k = k_cache[:, :, h].index_select(0, index).view(b, nblocks * bs, d)
        v = v_cache[:, :, h].index_select(0, index).view(b, nblocks * bs, d)
        scores = torch.bmm(qg[:, h], k.transpose(1, 2))  # [B, G, L']
        scores.masked_fill_(pad, float("-inf"))
        out[:, h] = torch.bmm(torch.softmax(scores, dim=-1), v)
    return out.view(b, hq, d)


def prefill_matmul(q, k_cache, v_cache, block_tables, cu_q_lens, seq_lens, scale) -> torch.Tensor:
    """Same contract as ``kernels.paged_prefill_attention`` (causal, over the cached prefix)."""
    hq, d = q.shape[1], q.shape[2]
    hkv = k_cache.shape[2]
    g = hq // hkv
    out = torch.empty_like(q)
    cu, lens = cu_q_lens.tolist(), seq_lens.tolist()
    for i, length in enumerate(lens):
        start, end = cu[i], cu[i + 1]
        n = end - start
        if n == 0:
            continue
        k = _gather(k_cache, block_tables[i : i + 1], length)[0].permute(1, 2, 0)  # [Hkv, D, L]
        v = _gather(v_cache, block_tables[i : i + 1], length)[0].transpose(0, 1)  # [Hkv, L, D]
        qg = (q[start:end] * scale).view(n, hkv, g, d).permute(1, 0, 2, 3).reshape(hkv, n * g, d)
        scores = torch.matmul(qg, k).view(hkv, n, g, length)
        qpos = torch.arange(length - n, length)
        future = torch.arange(length)[None, :] > qpos[:, None]  # [n, L]
        scores.masked_fill_(future[None, :, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1).view(hkv, n * g, length)
        o = torch.matmul(probs, v).view(hkv, n, g, d).permute(1, 0, 2, 3)
        out[start:end] = o.reshape(n, hq, d)
    return out


BACKENDS = ("auto", "kernels", "matmul")


def select(backend: str, device: torch.device):
    """(decode, prefill) attention functions: ``"kernels"`` (``ayo.kernels``, any device),
    ``"matmul"`` (the CPU path here), ``"auto"`` (matmul on CPU, kernels elsewhere)."""
    if backend == "matmul" or (backend == "auto" and device.type == "cpu"):
        return decode_matmul, prefill_matmul
    return kernels.paged_decode_attention, kernels.paged_prefill_attention
