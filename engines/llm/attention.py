"""Attention backends of the model: the ``ayo.kernels`` paged kernels, or the CPU paths here.

CPU decode: :func:`plan_decode` turns a step's block tables and lengths into gather indices and
masks once, and every layer's :func:`decode_matmul` attends with all KV heads at once (one
``index_select`` of K and of V, two matmuls) instead of a gather per head and layer. CPU
prefill uses the path below, which is faster in bfloat16 than the reference because it
scales q before the product (exact for power-of-two scales such as 64**-0.5) and takes the
softmax in the cache dtype (torch accumulates a bf16 softmax in float32; the scores are bf16
products either way). It is token-for-token equal to transformers in float32 (the tests run
both backends). On a CPU without native bfloat16
matmuls (no AVX-512-BF16 or AMX: oneDNN has no bf16 path) a bf16 cache's attention runs its
matmuls in float32: torch's emulated bf16 ``bmm`` there took 58% of a 256-token int8 prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def _gather(cache: torch.Tensor, table: torch.Tensor, length: int) -> torch.Tensor:
    """``[B, length, Hkv, D]`` of the paged ``cache`` through ``table [B, M]``."""
    bs = cache.shape[1]
    n = (length + bs - 1) // bs
    return cache[table[:, :n].long()].flatten(1, 2)[:, :length]


def native_bf16_matmul() -> bool:
    """Whether this CPU multiplies bfloat16 natively (oneDNN's bf16 path: AVX-512 or AMX)."""
    return torch.backends.mkldnn.is_available() and bool(
        torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype attention multiplies a ``dtype`` cache in: float32 for bfloat16 where the CPU
    only emulates it, else ``dtype``."""
    if dtype == torch.bfloat16 and not _NATIVE_BF16:
        return torch.float32
    return dtype


def prefill_matmul(q, k_cache, v_cache, block_tables, cu_q_lens, seq_lens, scale) -> torch.Tensor:
    """Same contract as ``kernels.paged_prefill_attention`` (causal, over the cached prefix)."""
    hq, d = q.shape[1], q.shape[2]
    mm = compute_dtype(q.dtype)
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
        qg, k, v = qg.to(mm), k.to(mm), v.to(mm)
        scores = torch.matmul(qg, k).view(hkv, n, g, length)
        qpos = torch.arange(length - n, length)
        future = torch.arange(length)[None, :] > qpos[:, None]  # [n, L]
        scores.masked_fill_(future[None, :, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1).view(hkv, n * g, length)
        o = torch.matmul(probs, v).view(hkv, n, g, d).permute(1, 0, 2, 3)
        out[start:end] = o.reshape(n, hq, d)  # back in the cache dtype
    return out


_NATIVE_BF16 = native_bf16_matmul()


@dataclass
class DecodeGroup:
    """Sequences of one decode group (sorted by length) and what every layer reads for them:
    flat block ids of the padded gather and the additive mask (``-inf`` past each length)."""

    rows: torch.Tensor | None  # [b] int64 rows of the batch, None: all rows in order
    index: torch.Tensor  # [b * nblocks] int64
    bias: torch.Tensor  # [b, 1, 1, nblocks * block_size] float32


def plan_decode(
    block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int, groups: int = 4
) -> list[DecodeGroup]:
    """Built once per step. Large batches are sorted by length and cut into ``groups`` groups,
    each padded only to its own longest (the gather reads, and attention multiplies, padding)."""
    batch = seq_lens.shape[0]
    if groups == 1 or batch < 4 * groups:
        parts = [None]
    else:
        parts = list(torch.tensor_split(torch.argsort(seq_lens), groups))
    plans = []
    for rows in parts:
        table = block_tables if rows is None else block_tables[rows]
        lens = (seq_lens if rows is None else seq_lens[rows]).long()
        used = (lens + block_size - 1) // block_size
        nblocks = int(used.max())
        cols = torch.arange(nblocks)
        table = table[:, :nblocks].long()
        # blocks past a sequence's last point to its first one: finite data, masked below
        index = table.where(cols[None, :] < used[:, None], table[:, :1]).reshape(-1)
        hidden = torch.arange(nblocks * block_size)[None, :] >= lens[:, None]
        bias = torch.zeros(hidden.shape).masked_fill_(hidden, float("-inf"))
        plans.append(DecodeGroup(rows, index, bias[:, None, None, :]))
    return plans


def decode_matmul(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    plans: list[DecodeGroup],
    scale: float,
) -> torch.Tensor:
    """One new token per sequence, all KV heads in one gather and two matmuls per group:
    ``q [B, Hq, D]`` -> ``[B, Hq, D]``. Softmax in float32, as the kernels' reference does."""
    if len(plans) == 1 and plans[0].rows is None:
        return _decode_group(q, k_cache, v_cache, plans[0], scale)
    out = torch.empty_like(q)
    for plan in plans:
        out[plan.rows] = _decode_group(q[plan.rows], k_cache, v_cache, plan, scale)
    return out


def _decode_group(q, k_cache, v_cache, plan: DecodeGroup, scale: float) -> torch.Tensor:
    batch, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    # [b, L, Hkv, D] gathered, read as [b, Hkv, D, L] and [b, Hkv, L, D] without a copy
    k = k_cache.index_select(0, plan.index).view(batch, -1, num_kv_heads, head_dim)
    v = v_cache.index_select(0, plan.index).view(batch, -1, num_kv_heads, head_dim)
    qg = q.view(batch, num_kv_heads, num_heads // num_kv_heads, head_dim)
    mm = compute_dtype(q.dtype)
    qg, k, v = qg.to(mm), k.to(mm), v.to(mm)
    scores = torch.matmul(qg, k.permute(0, 2, 3, 1))  # [b, Hkv, G, L]
    if scores.dtype != torch.float32:
        scores = scores.float()
    probs = torch.softmax(scores.mul_(scale).add_(plan.bias), dim=-1)
    out = torch.matmul(probs.to(v.dtype), v.transpose(1, 2))  # [b, Hkv, G, D]
    return out.to(q.dtype).view(batch, num_heads, head_dim)


BACKENDS = ("auto", "kernels", "matmul")


def uses_matmul(backend: str, device: torch.device) -> bool:
    """``"matmul"`` (the CPU paths here), ``"kernels"`` (``ayo.kernels``, any device) or
    ``"auto"`` (matmul on CPU, kernels elsewhere)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown attention backend {backend!r}; choose one of {BACKENDS}")
    return backend == "matmul" or (backend == "auto" and device.type == "cpu")
