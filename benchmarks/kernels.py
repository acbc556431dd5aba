"""Kernel microbenchmark: ``python -m benchmarks.kernels [--dtype D] [--json PATH]``.

For each kernel and a few realistic shapes (SmolLM2-135M and Llama-3-8B sized), the median time
of every backend that runs on this device, the achieved GB/s (memory-bound kernels) or TFLOP/s
(prefill attention, similarity search) from an explicit byte / FLOP count, and that as a
fraction of the device's peak measured in the same run: a large copy and a large matmul.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from dataclasses import asdict, dataclass

import torch

import ayo.kernels as K
from ayo.kernels.backend import available_backends

from .common import machine, median_seconds, print_table

log = logging.getLogger(__name__)


@dataclass
class Case:
    kernel: str
    shape: str
    unit: str  # "GB/s" or "TFLOP/s"
    amount: float  # bytes or FLOPs moved / done by one call
    call: object  # backend -> None


@dataclass
class Row:
    kernel: str
    shape: str
    backend: str
    median_us: float
    achieved: float
    unit: str
    peak_fraction: float


def measure_peaks(device: torch.device, dtype: torch.dtype) -> dict[str, float]:
    """Memory bandwidth (GB/s, read + write of a large copy) and matmul TFLOP/s in ``dtype``."""
    n_bytes = (1 << 30) if device.type == "cuda" else (256 << 20)
    src = torch.empty(n_bytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    t = median_seconds(lambda: dst.copy_(src), device)
    n = 8192 if device.type == "cuda" else 2048
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    tm = median_seconds(lambda: a @ b, device)
    return {"GB/s": 2 * n_bytes / t / 1e9, "TFLOP/s": 2 * n**3 / tm / 1e12}


def _paged(batch, length, block_size, kv_heads, dim, dtype, device):
    per = math.ceil(length / block_size)
    blocks = torch.randperm(batch * per, device=device).to(torch.int32).view(batch, per)
    shape = (batch * per, block_size, kv_heads, dim)
    k_cache = torch.randn(shape, device=device).to(dtype)
    v_cache = torch.randn(shape, device=device).to(dtype)
    lens = torch.full((batch,), length, dtype=torch.int32, device=device)
    return k_cache, v_cache, blocks, lens


def cases(device: torch.device, dtype: torch.dtype) -> list[Case]:
    el = torch.empty((), dtype=dtype).element_size()
    out: list[Case] = []
    rnd = lambda *s: torch.randn(*s, device=device).to(dtype)  # noqa: E731

    for tokens, hidden in [(256, 576), (64, 4096)]:
        x, w, r = rnd(tokens, hidden), rnd(hidden), rnd(tokens, hidden)
        out.append(
            Case(
                "rms_norm+residual",
                f"{tokens}x{hidden}",
                "GB/s",
                (4 * tokens * hidden + hidden) * el,
                lambda be, x=x, w=w, r=r: K.rms_norm(x, w, 1e-5, r, backend=be),
            )
        )
    for tokens, hq, hkv, dim in [(512, 9, 3, 64), (512, 32, 8, 128)]:
        q, k = rnd(tokens, hq, dim), rnd(tokens, hkv, dim)
        cache = K.rotary_cos_sin_cache(dim, 8192, 10000.0, device=device)
        pos = torch.randint(0, 8192, (tokens,), device=device)
        out.append(
            Case(
                "apply_rotary",
                f"T{tokens} H{hq}/{hkv} D{dim}",
                "GB/s",
                2 * tokens * (hq + hkv) * dim * el + tokens * dim * 4,
                lambda be, q=q, k=k, pos=pos, c=cache: K.apply_rotary(q, k, pos, c, backend=be),
            )
        )
    for tokens, inter in [(256, 1536), (64, 14336)]:
        x = rnd(tokens, 2 * inter)
        out.append(
            Case(
                "silu_and_mul",
                f"{tokens}x{2 * inter}",
                "GB/s",
                3 * tokens * inter * el,
                lambda be, x=x: K.silu_and_mul(x, backend=be),
            )
        )
    for tokens, hkv, dim in [(512, 3, 64), (512, 8, 128)]:
        k, v = rnd(tokens, hkv, dim), rnd(tokens, hkv, dim)
        kc, vc = rnd(tokens // 16 + 8, 16, hkv, dim), rnd(tokens // 16 + 8, 16, hkv, dim)
        slots = torch.randperm(kc.shape[0] * 16, device=device)[:tokens]
        out.append(
            Case(
                "write_kv_cache",
                f"T{tokens} Hkv{hkv} D{dim}",
                "GB/s",
                4 * tokens * hkv * dim * el + tokens * 8,
                lambda be, a=(k, v, kc, vc, slots): K.write_kv_cache(*a, backend=be),
            )
        )
    for batch, length, hq, hkv, dim in [(64, 512, 9, 3, 64), (32, 2048, 32, 8, 128)]:
        kc, vc, bt, lens = _paged(batch, length, 16, hkv, dim, dtype, device)
        q = rnd(batch, hq, dim)
        out.append(
            Case(
                "paged_decode_attention",
                f"B{batch} L{length} H{hq}/{hkv} D{dim}",
                "GB/s",
                2 * batch * length * hkv * dim * el + 2 * batch * hq * dim * el,
                lambda be, a=(q, kc, vc, bt, lens, dim**-0.5): K.paged_decode_attention(
                    *a, backend=be
                ),
            )
        )
    for batch, length, hq, hkv, dim in [(4, 512, 9, 3, 64), (2, 2048, 32, 8, 128)]:
        kc, vc, bt, lens = _paged(batch, length, 16, hkv, dim, dtype, device)
        q = rnd(batch * length, hq, dim)
        cu = torch.arange(0, batch + 1, dtype=torch.int32, device=device) * length
        # causal: QK^T and PV over ~L^2/2 pairs, 2 FLOPs per multiply-add
        flops = batch * 4 * hq * dim * length * (length + 1) / 2
        out.append(
            Case(
                "paged_prefill_attention",
                f"B{batch} L{length} H{hq}/{hkv} D{dim}",
                "TFLOP/s",
                flops,
                lambda be, a=(q, kc, vc, bt, cu, lens, dim**-0.5): K.paged_prefill_attention(
                    *a, backend=be
                ),
            )
        )
    for batch, vocab in [(64, 49152), (8, 128256)]:
        logits = rnd(batch, vocab).float()
        noise = torch.empty(batch, vocab, device=device).exponential_()
        out.append(
            Case(
                "sample(t=0.7,k=50,p=0.9)",
                f"B{batch} V{vocab}",
                "GB/s",
                2 * batch * vocab * 4,
                lambda be, lg=logits, n=noise: K.sample(
                    lg, 0.7, 50, 0.9, exp_noise=n if be != "flashinfer" else None, backend=be
                ),
            )
        )
    for nq, nk, dim in [(64, 100_000, 384)]:
        qs, ks = rnd(nq, dim), rnd(nk, dim)
        out.append(
            Case(
                "similarity_topk(k=10)",
                f"Q{nq} N{nk} D{dim}",
                "TFLOP/s",
                2 * nq * nk * dim,
                lambda be, a=(qs, ks): K.similarity_topk(*a, 10, backend=be),
            )
        )
    return out


def run(device: torch.device, dtype: torch.dtype) -> tuple[dict[str, float], list[Row]]:
    peaks = measure_peaks(device, dtype)
    backends = available_backends(device)
    rows: list[Row] = []
    for case in cases(device, dtype):
        for be in backends:
            try:
                t = median_seconds(lambda c=case, b=be: c.call(b), device)
            except ValueError as e:  # this kernel has no such backend
                log.debug("%s on %s: %s", case.kernel, be, e)
                continue
            scale = 1e9 if case.unit == "GB/s" else 1e12
            achieved = case.amount / t / scale
            rows.append(
                Row(
                    case.kernel,
                    case.shape,
                    be,
                    t * 1e6,
                    achieved,
                    case.unit,
                    achieved / peaks[case.unit],
                )
            )
    return peaks, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="float32, float16 or bfloat16")
    parser.add_argument("--json", dest="json_path", help="write the numbers to this file")
    args = parser.parse_args()
    device = torch.device(args.device)
    default = "bfloat16" if device.type == "cuda" else "float32"
    dtype = getattr(torch, args.dtype or default)
    peaks, rows = run(device, dtype)
    print(f"# Kernel microbenchmark on {machine()}, dtype {dtype}")
    print(
        f"# measured peaks: copy {peaks['GB/s']:.1f} GB/s (read+write), "
        f"matmul {peaks['TFLOP/s']:.3f} TFLOP/s in {dtype}"
    )
    if device.type != "cuda":
        print("# Triton and FlashInfer need a CUDA GPU: only the torch path runs here.")
    print_table(
        ["kernel", "shape", "backend", "median us", "achieved", "unit", "of peak"],
        [
            [
                r.kernel,
                r.shape,
                r.backend,
                f"{r.median_us:.1f}",
                f"{r.achieved:.3f}",
                r.unit,
                f"{100 * r.peak_fraction:.1f}%",
            ]
            for r in rows
        ],
    )
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(
                {
                    "machine": machine(),
                    "dtype": str(dtype),
                    "peaks": peaks,
                    "rows": [asdict(r) for r in rows],
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
