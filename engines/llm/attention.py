"""Attention backends of the model: the ``ayo.kernels`` paged kernels, or a CPU bf16 prefill.

Decode always uses ``ayo.kernels.paged_decode_attention`` (on CPU its torch reference gathers per
KV head and runs batched matmuls: the fast path this module first had, moved there). Prefill on
CPU may use the path below, which is faster in bfloat16 than the reference because it
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
    ``"matmul"`` (the CPU prefill here), ``"auto"`` (matmul on CPU, kernels elsewhere)."""
    if backend == "matmul" or (backend == "auto" and device.type == "cpu"):
        return kernels.paged_decode_attention, prefill_matmul
    return kernels.paged_decode_attention, kernels.paged_prefill_attention
