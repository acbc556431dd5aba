"""Weight-only quantized linears on the CPU: int8 per output row and int4 in groups of 32.

A decode step at batch 1 reads every weight once, so its time is the bytes it streams: a
135M-parameter model reads 538 MB per token in float32, 269 MB in bfloat16, 135 MB in int8 and
95 MB in int4 (its lm_head kept at int8, as llama.cpp's Q4 files keep theirs at Q8_0). The
matmuls are torch's own packed CPU kernels, the ones gpt-fast and torchao call:
``aten._weight_int8pack_mm`` (int8 weights, one scale per output row) and
``aten._weight_int4pack_mm_for_cpu`` (4-bit values in groups of 32 along the input, each group
with a scale and a zero point: ``w = (q - 8) * scale + zero``). Both take bfloat16 inputs: their
float32 paths are 7-12x slower on every CPU measured (benchmarks.llm_engine), so a float32
model's activations are rounded to bfloat16 at the kernel's door and its result comes back in
float32 (the residual stream, norms and attention stay in float32).

These kernels win only at a few rows: on the 2-core AVX2 EPYC, int8 beats oneDNN's packed
float32 matmul at 1-3 rows and loses from 4 on (2x slower at 256). So each quantized linear
also keeps the dense weight, oneDNN-packed, for matmuls of ``dense_from`` rows or more
(prefill chunks, batched decode): the crossover measured once per CPU (:func:`time_formats`).
That copy costs the dense bytes in memory (538 MB for SmolLM2-135M in float32), not in reads per
decode step; ``EngineConfig.dense_prefill=False`` drops it.

Where the weights come from a GGUF file, its Q4_1 blocks (32 values, an fp16 scale ``d`` and
minimum ``m``: ``w = d * q + m``) become int4 groups value for value (``scale = d``, ``zero = m +
8d``); the scales are rounded to bfloat16 (the kernel's fast path), the only change to the file's
numbers. Everything else is quantized at load from the exact dense values, as gpt-fast does:
int8 symmetric per output row (``scale = max|w| / 127``), int4 asymmetric per group of 32
(``scale = (max - min) / 15``, ``zero = min + 8 * scale``). A GGUF's Q8_0 blocks (a scale per
32 values) have no per-row int8 form, so they are requantized per row from their exact values.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .formats import ACTIVATIONS, DENSE_FORMATS, WEIGHT_FORMATS
from .linear import dense_linear

GROUP = 32  # int4 group size: GGUF's block, and what the CPU kernel supports (32..256)
KERNEL_DTYPE = torch.bfloat16  # what the quantized kernels multiply in


@dataclass
class Blocks:
    """A GGUF tensor's own quantized values, rows in the Hugging Face order.

    ``q [N, K]``: Q4_1 values 0..15 (uint8) or Q8_0 values (int8); ``d [N, K/32]`` the block
    scales (float32, exactly the file's fp16); ``m`` the Q4_1 block minimums (None for Q8_0).
    """

    kind: str  # "Q4_1" | "Q8_0"
    q: torch.Tensor
    d: torch.Tensor
    m: torch.Tensor | None

    def rows(self, index: torch.Tensor) -> Blocks:
        """The same blocks with rows reordered by ``index``."""
        m = None if self.m is None else self.m[index]
        return Blocks(self.kind, self.q[index], self.d[index], m)

    def dense(self) -> torch.Tensor:
        """The exact float32 values (what ``gguf.quants.dequantize`` gives)."""
        d = self.d.repeat_interleave(GROUP, 1)
        if self.m is None:
            return self.q.float() * d
        return self.q.float() * d + self.m.repeat_interleave(GROUP, 1)

    @staticmethod
    def stack(parts: list[Blocks | None]) -> Blocks | None:
        """Blocks of tensors stacked by rows (None unless all are blocks of one kind)."""
        if not parts or any(b is None or b.kind != parts[0].kind for b in parts):
            return None
        m = None if parts[0].m is None else torch.cat([b.m for b in parts])
        return Blocks(
            parts[0].kind, torch.cat([b.q for b in parts]), torch.cat([b.d for b in parts]), m
        )


def gguf_blocks(data: np.ndarray, kind: str) -> Blocks | None:
    """The blocks of a GGUF tensor's raw bytes ``[N, K/32 * block_bytes]`` (Q4_1 or Q8_0; None
    for any other type). Q4_1 block: fp16 d, fp16 m, 16 bytes of nibbles (low nibbles are values
    0-15 of the block, high nibbles 16-31). Q8_0 block: fp16 d, 32 int8 values."""
    if kind not in ("Q4_1", "Q8_0"):
        return None
    rows = data.shape[0]
    size = 20 if kind == "Q4_1" else 34
    raw = np.ascontiguousarray(data).reshape(rows, -1, size)
    d = torch.from_numpy(raw[..., 0:2].copy().view(np.float16)[..., 0]).float()
    if kind == "Q8_0":
        q = torch.from_numpy(raw[..., 2:].copy().view(np.int8)).reshape(rows, -1)
        return Blocks(kind, q, d, None)
    m = torch.from_numpy(raw[..., 2:4].copy().view(np.float16)[..., 0]).float()
    nib = torch.from_numpy(raw[..., 4:].copy())
    q = torch.cat([nib & 0xF, nib >> 4], dim=-1).reshape(rows, -1)
    return Blocks(kind, q, d, m)


class QuantLinear(ABC):
    """``x @ w.T (+ bias)`` through a quantized kernel below ``dense_from`` rows, through the
    dense copy ``dense(x)`` (when kept) from there on. Inputs and output in the model's dtype."""

    nbytes: int  # what a decode step reads of this weight
    dense: Callable[[torch.Tensor], torch.Tensor] | None = None
    dense_from: int = 1 << 30
    dense_nbytes: int = 0

    def keep_dense(self, dense: Callable[[torch.Tensor], torch.Tensor], rows: int, nbytes: int):
        """Route matmuls of ``rows`` rows or more to ``dense`` (which holds ``nbytes``)."""
        self.dense, self.dense_from, self.dense_nbytes = dense, rows, nbytes

    @abstractmethod
    def kernel(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ w.T`` through the quantized kernel (``x`` in ``KERNEL_DTYPE``)."""

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.dense is not None and x.shape[0] >= self.dense_from:
            out = self.dense(x)
        else:
            out = self.kernel(x.to(KERNEL_DTYPE)).to(x.dtype)
        return out if bias is None else out + bias


class Int8Linear(QuantLinear):
    """int8 weights with one scale per output row (symmetric)."""

    def __init__(self, w: torch.Tensor):
        w = w.float()
        scale = (w.abs().amax(dim=1) / 127).clamp_min(torch.finfo(torch.float32).tiny)
        self.weight = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
        self.scale = scale.to(KERNEL_DTYPE)
        self.nbytes = self.weight.numel() + self.scale.numel() * self.scale.element_size()

    def kernel(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(x, self.weight, self.scale)


class Int4Linear(QuantLinear):
    """4-bit weights in groups of 32 along the input, each group with a scale and a zero point
    (``w = (q - 8) * scale + zero``)."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor):
        """``q [N, K]`` values 0..15; ``scale``, ``zero [N, K/32]``."""
        self.weight = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
            q.to(torch.int32).contiguous(), 1
        )
        sz = torch.stack([scale.t(), zero.t()], dim=-1)
        self.scale_zeros = sz.to(KERNEL_DTYPE).contiguous()
        self.nbytes = self.weight.numel() + sz.numel() * self.scale_zeros.element_size()

    @classmethod
    def from_dense(cls, w: torch.Tensor) -> Int4Linear:
        """Asymmetric min/max quantization of each group of 32 input values of ``w [N, K]``."""
        n, k = w.shape
        g = w.float().reshape(n, k // GROUP, GROUP)
        lo, hi = g.amin(dim=-1), g.amax(dim=-1)
        scale = ((hi - lo) / 15).clamp_min(torch.finfo(torch.float32).tiny)
        q = torch.round((g - lo[..., None]) / scale[..., None]).clamp(0, 15).reshape(n, k)
        return cls(q, scale, lo + 8 * scale)

    @classmethod
    def from_blocks(cls, b: Blocks) -> Int4Linear:
        """A GGUF Q4_1 tensor's own values: ``d * q + m == (q - 8) * d + (m + 8d)``."""
        return cls(b.q, b.d, b.m + 8 * b.d)

    def kernel(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.weight, GROUP, self.scale_zeros)


def quantize(dense: Callable[[], torch.Tensor], blocks: Blocks | None, fmt: str) -> QuantLinear:
    """One weight in ``fmt`` (``int8`` or ``int4``): Q4_1 blocks repacked as they are for int4,
    everything else quantized from the exact dense values ``dense()`` (see the module
    docstring). An int4 matrix whose input size is not a multiple of 32 takes int8."""
    if fmt == "int4" and blocks is not None and blocks.kind == "Q4_1":
        return Int4Linear.from_blocks(blocks)
    w = dense()
    if fmt == "int4" and w.shape[1] % GROUP == 0:
        return Int4Linear.from_dense(w)
    return Int8Linear(w)


def quantized_linear(
    x: torch.Tensor, w: QuantLinear, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """The model's ``linear`` when its weights are quantized."""
    return w(x, bias)


# One decoder layer of SmolLM2-135M (qkv, o, gate_up, down): the shapes the formats are timed on
PROBE_SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))
PROBE_ROWS = (1, 2, 3, 4, 6, 8, 16, 256)
PROBE_PROMPT = 256  # a request of 256 prompt tokens and as many decoded ones


def format_key(fmt: str, dtype: str) -> str:
    """A weights format run in ``dtype``: the format's name in its default dtype, else
    ``"int8-bfloat16"`` etc. (what measurements and engine profiles are keyed by)."""
    if fmt in DENSE_FORMATS or ACTIVATIONS[fmt] == dtype:
        return fmt
    return f"{fmt}-{dtype}"


def split_key(key: str) -> tuple[str, str]:
    """``format_key``'s inverse: ``(weights format, dtype)``."""
    fmt, _, dtype = key.partition("-")
    return fmt, dtype or ACTIVATIONS[fmt]


def time_formats(keys=WEIGHT_FORMATS, reps: int = 7) -> dict[str, dict[str, float]]:
    """Per format key (:func:`format_key`), one layer's matmuls timed at ``PROBE_ROWS`` rows (the
    best of ``reps``, at torch's current thread count; about a second in all): ``{"request_s":
    prefill of 256 rows + 256 single-row steps, "dense_from": rows from which the dense copy
    (in the same dtype) is faster at every larger size (0: never)}``."""
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(n, k, generator=gen) * 0.05 for n, k in PROBE_SHAPES]
    inputs = {m: [torch.randn(m, k, generator=gen) for _, k in PROBE_SHAPES] for m in PROBE_ROWS}

    def best(lins, m: int, dtype: torch.dtype) -> float:
        xs = [x.to(dtype) for x in inputs[m]]
        times = []
        for _ in range(reps if m < 64 else 2):
            t = time.perf_counter()
            for lin, x in zip(lins, xs):
                lin(x)
            times.append(time.perf_counter() - t)
        return min(times[1:] or times)

    dense = {}
    for dtype in {split_key(k)[1] for k in keys}:
        lins = [dense_linear(w, getattr(torch, dtype)) for w in weights]
        dense[dtype] = {m: best(lins, m, getattr(torch, dtype)) for m in PROBE_ROWS}
    out = {}
    for key in keys:
        fmt, dtype = split_key(key)
        ref = dense[dtype]
        if fmt in DENSE_FORMATS:
            t, cross = ref, 0
        else:
            lins = [quantize(lambda w=w: w, None, fmt) for w in weights]
            q = {m: best(lins, m, getattr(torch, dtype)) for m in PROBE_ROWS}
            cross = next(
                (m for m in PROBE_ROWS if all(ref[n] < q[n] for n in PROBE_ROWS if n >= m)), 0
            )
            t = {m: ref[m] if cross and m >= cross else q[m] for m in PROBE_ROWS}
        out[key] = {"request_s": t[PROBE_PROMPT] + PROBE_PROMPT * t[1], "dense_from": cross}
    return out
