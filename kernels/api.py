"""The public kernel API: argument checks, then dispatch to a backend.

Every function takes ``backend=None`` (the best available for the tensors' device; always the
torch reference on CPU), ``"torch"``, ``"triton"`` or ``"flashinfer"``. Shapes: ``T`` tokens,
``B`` sequences, ``Hq``/``Hkv`` query/KV heads (``Hq % Hkv == 0``), ``D`` head dim. KV caches are
per layer, ``[num_blocks, block_size, Hkv, D]`` (FlashInfer's NHD layout).
"""

from __future__ import annotations

import importlib

import torch

from . import backend as _backend
from .ref import activation as _ref_activation
from .ref import attention as _ref_attention
from .ref import kv_cache as _ref_kv_cache
from .ref import norm as _ref_norm
from .ref import rotary as _ref_rotary
from .ref import sampling as _ref_sampling
from .ref import similarity as _ref_similarity

_ALL = ("torch", "triton", "flashinfer")
_NO_FLASHINFER = ("torch", "triton")


def _impl(op: str, backend: str | None, device: torch.device, supported=_ALL):
    name = _backend.resolve(backend, device, op, supported)
    if name == "torch":
        return {
            "rms_norm": _ref_norm.rms_norm,
            "apply_rotary": _ref_rotary.apply_rotary,
            "silu_and_mul": _ref_activation.silu_and_mul,
            "write_kv_cache": _ref_kv_cache.write_kv_cache,
            "paged_decode_attention": _ref_attention.paged_decode_attention,
            "paged_prefill_attention": _ref_attention.paged_prefill_attention,
            "sample": _ref_sampling.sample,
            "apply_token_bitmask": _ref_sampling.apply_token_bitmask,
            "similarity_topk": _ref_similarity.similarity_topk,
        }[op]
    module = "triton_ops" if name == "triton" else "flashinfer_ops"
    return getattr(importlib.import_module(f"{__package__}.{module}"), op)


def implementation(op: str, device: torch.device | str, backend: str | None = None):
    """The backend function behind ``op`` (e.g. ``"rms_norm"``) for ``device``, resolved once:
    what a model binds at construction so its per-token calls skip the checks and dispatch
    above. It takes the same positional arguments as the public function."""
    supported = (
        _NO_FLASHINFER
        if op in ("write_kv_cache", "similarity_topk", "apply_token_bitmask")
        else _ALL
    )
    return _impl(op, backend, torch.device(device), supported)


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, head_dim: int) -> None:
    _check(
        k_cache.dim() == 4 and k_cache.shape == v_cache.shape,
        f"k_cache and v_cache must both be [num_blocks, block_size, Hkv, D]; got "
        f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}",
    )
    _check(k_cache.shape[3] == head_dim, f"cache head_dim {k_cache.shape[3]} != {head_dim}")
    _check(k_cache.is_contiguous() and v_cache.is_contiguous(), "KV caches must be contiguous")


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
    *,
    backend: str | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm over the last dim: ``x [..., H]``, ``weight [H]``.

    Returns ``out``; with ``residual`` (same shape as x) returns ``(out, x + residual)``: the
    fused add-then-norm of a pre-norm block, whose second value is the next residual.
    """
    _check(x.shape[-1] == weight.shape[-1] and weight.dim() == 1, "weight must be [x.shape[-1]]")
    _check(residual is None or residual.shape == x.shape, "residual must have x's shape")
    return _impl("rms_norm", backend, x.device)(x, weight, eps, residual)


def apply_rotary(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    *,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding, NeoX / Llama half-rotation style, **in place**.

    ``q [T, Hq, D]``, ``k [T, Hkv, D]``, ``positions [T]`` (int), ``cos_sin_cache
    [max_positions, D]`` float32 holding ``cos`` in its first ``D/2`` columns and ``sin`` in the
    rest (see :func:`rotary_cos_sin_cache`). Overwrites ``q`` and ``k`` and returns them.
    """
    _check(q.dim() == 3 and k.dim() == 3, "q and k must be [T, heads, D]")
    _check(q.shape[0] == k.shape[0] == positions.shape[0], "q, k and positions disagree on T")
    _check(q.shape[2] == k.shape[2] == cos_sin_cache.shape[1], "head_dim mismatch with cache")
    _check(q.shape[2] % 2 == 0, "head_dim must be even")
    return _impl("apply_rotary", backend, q.device)(q, k, positions, cos_sin_cache)


def rotary_cos_sin_cache(
    head_dim: int,
    max_positions: int,
    base: float = 10000.0,
    *,
    scaling_factor: float = 1.0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """``[max_positions, head_dim]`` float32: ``cos`` then ``sin`` of ``pos * inv_freq``, with
    ``inv_freq = 1 / base ** (arange(0, D, 2) / D)`` (positions divided by ``scaling_factor``:
    linear scaling), computed exactly as Hugging Face's Llama rotary embedding does."""
    inv_freq = 1.0 / (
        base ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim)
    )
    pos = torch.arange(max_positions, dtype=torch.int64, device=device).float() / scaling_factor
    freqs = torch.outer(pos, inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1)


def silu_and_mul(x: torch.Tensor, *, backend: str | None = None) -> torch.Tensor:
    """``x [..., 2d]`` -> ``silu(x[..., :d]) * x[..., d:]``, shape ``[..., d]``."""
    _check(x.shape[-1] % 2 == 0, f"last dim must be even (gate and up), got {x.shape[-1]}")
    return _impl("silu_and_mul", backend, x.device)(x)


def write_kv_cache(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    backend: str | None = None,
) -> None:
    """Write ``k, v [T, Hkv, D]`` into the caches at ``slot_mapping [T]`` (int;
    ``slot = block * block_size + offset``; ``-1`` skips the token)."""
    _check(k.shape == v.shape and k.dim() == 3, "k and v must both be [T, Hkv, D]")
    _check_cache(k_cache, v_cache, k.shape[2])
    _check(k.shape[1] == k_cache.shape[2], f"k has {k.shape[1]} heads, cache {k_cache.shape[2]}")
    _check(slot_mapping.shape == (k.shape[0],), "slot_mapping must be [T]")
    fn = _impl("write_kv_cache", backend, k.device, _NO_FLASHINFER)
    fn(k, v, k_cache, v_cache, slot_mapping)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """Decode attention: ``q [B, Hq, D]`` (one new token per sequence, already written to the
    cache) over ``seq_lens[b]`` cached positions found through ``block_tables [B, max_blocks]``
    (int32). Grouped-query: query head h reads KV head ``h // (Hq / Hkv)``. Returns
    ``[B, Hq, D]``."""
    _check(q.dim() == 3, "q must be [B, Hq, D]")
    _check_cache(k_cache, v_cache, q.shape[2])
    _check(q.shape[1] % k_cache.shape[2] == 0, "Hq must be a multiple of Hkv")
    _check(block_tables.dim() == 2 and block_tables.shape[0] == q.shape[0], "block_tables [B, M]")
    _check(seq_lens.shape == (q.shape[0],), "seq_lens must be [B]")
    fn = _impl("paged_decode_attention", backend, q.device)
    return fn(q, k_cache, v_cache, block_tables, seq_lens, scale)


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    cu_q_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """Causal prefill / append attention. ``q [T, Hq, D]`` packs the new tokens of B sequences
    (``cu_q_lens [B+1]`` int32 offsets) whose K/V are already in the cache; ``seq_lens [B]`` are
    total lengths including them. New token i of sequence b sits at position
    ``seq_lens[b] - q_len_b + i`` and attends to every position up to its own, so one kernel
    serves full, chunked and partial (appended to a kept prefix) prefill. Returns ``[T, Hq, D]``.
    """
    _check(q.dim() == 3, "q must be [T, Hq, D]")
    _check_cache(k_cache, v_cache, q.shape[2])
    _check(q.shape[1] % k_cache.shape[2] == 0, "Hq must be a multiple of Hkv")
    n = seq_lens.shape[0]
    _check(cu_q_lens.shape == (n + 1,), "cu_q_lens must be [B+1]")
    _check(block_tables.dim() == 2 and block_tables.shape[0] == n, "block_tables must be [B, M]")
    _check(int(cu_q_lens[-1]) == q.shape[0], "cu_q_lens[-1] must equal the number of tokens")
    q_lens = cu_q_lens[1:] - cu_q_lens[:-1]
    _check(bool((q_lens <= seq_lens.to(q_lens.device)).all()), "a q_len exceeds its seq_len")
    fn = _impl("paged_prefill_attention", backend, q.device)
    return fn(q, k_cache, v_cache, block_tables, cu_q_lens, seq_lens, scale)


def _on_host(value: float | torch.Tensor) -> torch.Tensor | None:
    """``value`` where reading it waits on no device: a Python number or a CPU tensor (None for
    a tensor on a GPU)."""
    if isinstance(value, torch.Tensor):
        return value if value.device.type == "cpu" else None
    return torch.as_tensor(value)


def _per_row(value, batch: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=dtype, device=device)
    return t.expand(batch).contiguous() if t.dim() == 0 else t


def sample(
    logits: torch.Tensor,
    temperature: float | torch.Tensor = 0.0,
    top_k: int | torch.Tensor = 0,
    top_p: float | torch.Tensor = 1.0,
    generator: torch.Generator | None = None,
    *,
    exp_noise: torch.Tensor | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Draw one token per row of ``logits [B, V]``; returns int64 ``[B]``.

    Per row (scalars or ``[B]`` tensors): ``temperature`` 0 means greedy (argmax); ``top_k`` 0
    keeps all; ``top_p`` 1 keeps all. The draw is the exponential race ``argmax(p / E)`` with
    ``E ~ Exp(1)`` taken from ``generator`` (seeded: reproducible), or from ``exp_noise [B, V]``
    when given (e.g. per-request generators), so every backend picks the same token. A batch
    that is all greedy draws no noise (the generator is not advanced).

    The parameters are checked, and an all-greedy batch recognised, where that reads nothing
    back from a device: on Python numbers and CPU tensors. Parameters already on a GPU are the
    caller's to have checked (an engine checks each request's once, on the host).
    """
    _check(logits.dim() == 2, "logits must be [B, V]")
    batch, vocab = logits.shape
    dev = logits.device
    temp_h, top_k_h, top_p_h = (_on_host(v) for v in (temperature, top_k, top_p))
    if temp_h is not None:
        _check(bool((temp_h >= 0).all()), "temperature must be >= 0")
    if top_k_h is not None:
        _check(bool((top_k_h >= 0).all()), "top_k must be >= 0 (0 disables it)")
    if top_p_h is not None:
        _check(bool(((top_p_h > 0) & (top_p_h <= 1)).all()), "top_p must be in (0, 1]")
    if exp_noise is None and temp_h is not None and not bool((temp_h > 0).any()):
        return torch.argmax(logits, dim=1)  # all greedy: no noise to draw, nothing to filter
    temperature = _per_row(temperature, batch, torch.float32, dev)
    top_k = _per_row(top_k, batch, torch.int64, dev)
    top_p = _per_row(top_p, batch, torch.float32, dev)
    # FlashInfer draws with its own generator, so it cannot honour a caller's noise.
    fn = _impl("sample", backend, dev, _NO_FLASHINFER if exp_noise is not None else _ALL)
    if fn.__module__.endswith("flashinfer_ops"):
        return fn(logits, temperature, top_k, top_p, generator)
    if exp_noise is None:
        exp_noise = torch.empty(batch, vocab, device=dev).exponential_(generator=generator)
    _check(exp_noise.shape == logits.shape, "exp_noise must have the logits' shape")
    return fn(logits, temperature, top_k, top_p, exp_noise)


def apply_token_bitmask(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    rows: torch.Tensor | None = None,
    *,
    backend: str | None = None,
) -> None:
    """Constrained decoding's mask, in place: ``logits [B, V]``, ``bitmask [R, W]`` int32 (bit
    ``j % 32`` of word ``j // 32`` allows token ``j``, as xgrammar and llguidance fill it), for
    the rows ``rows [R]`` (default: all ``B``, then ``R == B``). Blocked tokens (bit 0, or
    ``j >= 32 * W``) get -inf; allowed ones keep their logit. One operation for the batch."""
    _check(logits.dim() == 2, "logits must be [B, V]")
    _check(bitmask.dim() == 2 and bitmask.dtype == torch.int32, "bitmask must be int32 [R, W]")
    if rows is None:
        rows = torch.arange(logits.shape[0], device=logits.device)
    _check(rows.dim() == 1 and len(rows) == bitmask.shape[0], "rows must be [R], one per mask")
    if rows.device.type == "cpu" and len(rows):  # checked where it costs no device sync
        _check(int(rows.min()) >= 0 and int(rows.max()) < logits.shape[0], "rows out of range")
    if len(rows):
        fn = _impl("apply_token_bitmask", backend, logits.device, _NO_FLASHINFER)
        fn(logits, bitmask.to(logits.device), rows.to(logits.device))


def similarity_topk(
    queries: torch.Tensor, keys: torch.Tensor, k: int, *, backend: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact inner-product search: ``queries [Q, D]``, ``keys [N, D]`` -> ``(scores, ids)``, both
    ``[Q, min(k, N)]``, best first; ``ids`` int64 row numbers of ``keys``."""
    _check(queries.dim() == 2 and keys.dim() == 2, "queries and keys must be 2-D")
    _check(queries.shape[1] == keys.shape[1], "queries and keys differ in dimension")
    _check(k >= 1, "k must be >= 1")
    return _impl("similarity_topk", backend, queries.device, _NO_FLASHINFER)(queries, keys, k)
