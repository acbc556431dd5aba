"""``python -m ayo demo``: an end-to-end check of this install's compute kernels.

Runs every kernel of :mod:`ayo.kernels` on small, awkward shapes through each backend that can
run here (on a CPU machine: the torch reference, and Triton in its interpreter) and reports the
largest difference from the torch reference. Exits non-zero if any backend disagrees.
"""

from __future__ import annotations

import logging
import os
import sys
import time

import torch

log = logging.getLogger("ayo.cli.demo")


def _cases(device: torch.device):
    import ayo.kernels as K

    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(device)

    x, w, r = rnd(7, 99), rnd(99), rnd(7, 99)
    yield "rms_norm", lambda be: K.rms_norm(x, w, 1e-5, r, backend=be)[0]
    cache = K.rotary_cos_sin_cache(64, 512, 10000.0, device=device)
    q, k, pos = rnd(17, 9, 64), rnd(17, 3, 64), torch.arange(17, device=device) * 7
    yield "apply_rotary", lambda be: K.apply_rotary(q.clone(), k.clone(), pos, cache, backend=be)[0]
    gu = rnd(5, 2 * 40)
    yield "silu_and_mul", lambda be: K.silu_and_mul(gu, backend=be)
    # A paged cache holding three sequences of 1, 17 and 40 tokens in scattered 16-token blocks.
    lens = [1, 17, 40]
    k_cache, v_cache = rnd(12, 16, 3, 64), rnd(12, 16, 3, 64)
    tables = torch.tensor([[5, 0, 0], [2, 9, 0], [7, 1, 11]], dtype=torch.int32, device=device)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    kv = rnd(4, 3, 64)
    slots = torch.tensor([5 * 16 + 1, -1, 9 * 16 + 1, 11 * 16 + 8], device=device)

    def write(be):
        kc, vc = k_cache.clone(), v_cache.clone()
        K.write_kv_cache(kv, kv, kc, vc, slots, backend=be)
        return kc

    yield "write_kv_cache", write
    qd = rnd(3, 9, 64)
    yield (
        "paged_decode_attention",
        lambda be: K.paged_decode_attention(
            qd, k_cache, v_cache, tables, seq_lens, 0.125, backend=be
        ),
    )
    cu = torch.tensor([0, 1, 6, 46], dtype=torch.int32, device=device)
    qp = rnd(46, 9, 64)
    yield (
        "paged_prefill_attention",
        lambda be: K.paged_prefill_attention(
            qp, k_cache, v_cache, tables, cu, seq_lens, 0.125, backend=be
        ),
    )
    logits, noise = rnd(4, 1000), torch.empty(4, 1000, device=device).exponential_(generator=None)
    temps = torch.tensor([0.0, 0.7, 1.0, 1.2], device=device)
    yield (
        "sample",
        lambda be: K.sample(logits, temps, 20, 0.9, exp_noise=noise, backend=be).float(),
    )
    qs, ks = rnd(5, 67), rnd(300, 67)
    yield "similarity_topk", lambda be: K.similarity_topk(qs, ks, 10, backend=be)[0]


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any Triton kernel is decorated
    from ayo.kernels.backend import available_backends

    backends = available_backends(device)
    log.info("ayo kernels on %s; backends: %s", device, ", ".join(backends))
    failures = 0
    for name, fn in _cases(device):
        ref = fn("torch")
        for be in backends:
            if be == "torch":
                continue
            t0 = time.perf_counter()
            try:
                out = fn(be)
            except ValueError:  # no implementation of this op in that backend
                continue
            err = (out.float() - ref.float()).abs().max().item()
            ok = err <= 1e-4
            failures += not ok
            log.info(
                "%-24s %-10s max |diff| %.2e  %s  (%.0f ms)",
                name,
                be,
                err,
                "ok" if ok else "MISMATCH",
                1e3 * (time.perf_counter() - t0),
            )
    if failures:
        log.error("%d kernel results disagree with the torch reference", failures)
    else:
        log.info("all kernels agree with the torch reference")
    return 1 if failures else 0
