"""Benchmark: Ayo's LLM engine vs transformers ``generate`` on SmolLM2-135M-Instruct (GGUF).

    python -m benchmarks.llm_engine [--requests 64] [--output-tokens 128] [--json out.json]

Workload: ``--requests`` prompts of random token ids with lengths drawn uniformly in
[--min-prompt, --max-prompt] (seeded), ``--output-tokens`` greedy tokens each (end-of-sequence
ignored, so both sides produce exactly that many). All requests arrive at t=0.
Ours: one ``generate`` call (continuous batching, chunked prefill). Theirs: transformers
``generate`` in left-padded batches of ``--hf-batch``, same weights, same greedy settings.
Also: ours at batch 1 against the decode limit (weight bytes per step / measured memory-copy
bandwidth).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
MODEL = "smollm2-135m-instruct"


def copy_bandwidth(mib: int = 256, reps: int = 10) -> float:
    """Bytes/s of a large tensor copy, counting read + write (best of ``reps``)."""
    src = torch.ones(mib * 2**20 // 4)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t)
    return 2 * src.numel() * 4 / best


def workload(n: int, lo: int, hi: int, seed: int, vocab: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(100, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def machine() -> str:
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{name}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads, load {load:.1f}"


async def run_ours(prompts, out_tokens, dtype, args, loaded, tokenizer) -> dict:
    from ayo.engines.llm import EngineConfig, LLMEngine, SamplingParams
    from ayo.engines.llm.model import LlamaModel

    config = EngineConfig(
        dtype=dtype,
        kv_cache_gib=args.kv_cache_gib,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
    )
    model = LlamaModel(loaded.config, loaded.weights, config.torch_dtype, config.attention)
    params = SamplingParams(max_tokens=out_tokens, ignore_eos=True)
    async with LLMEngine(model, tokenizer, config) as eng:
        await eng.generate(prompts[0][:32], SamplingParams(max_tokens=4, ignore_eos=True))  # warm
        t = time.perf_counter()
        results = await eng.generate(prompts, params)
        wall = time.perf_counter() - t
        (single,) = await eng.generate(
            prompts[0][:128], SamplingParams(max_tokens=64, ignore_eos=True)
        )
        stats = eng.stats()
    n_out = sum(len(r.token_ids) for r in results)
    return {
        "engine": f"ayo {dtype}",
        "wall_s": wall,
        "output_tokens": n_out,
        "output_tok_s": n_out / wall,
        "mean_ttft_s": sum(r.time_to_first_token_s for r in results) / len(results),
        "mean_tpot_s": sum(r.time_per_output_token_s for r in results) / len(results),
        "batch1_tpot_s": single.time_per_output_token_s,
        "weight_bytes": model.weight_bytes,
        "preemptions": stats.preemptions,
        "tokens": [r.token_ids for r in results],
    }


class _Clock:
    """A transformers streamer that records when each generation step's tokens arrive."""

    def __init__(self):
        self.times: list[float] = []

    def put(self, value) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def run_hf(prompts, out_tokens, dtype, batch, path) -> dict:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=getattr(torch, dtype)
    ).eval()
    hf.generation_config.eos_token_id = None
    pad = 2
    ttfts, tpots, tokens = [], [], []
    with torch.inference_mode():
        hf.generate(
            torch.tensor([prompts[0][:32]]), max_new_tokens=2, do_sample=False, pad_token_id=pad
        )
        t0 = time.perf_counter()
        for i in range(0, len(prompts), batch):
            group = prompts[i : i + batch]
            width = max(len(p) for p in group)
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in group])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in group])
            clock = _Clock()
            out = hf.generate(
                ids, attention_mask=mask, max_new_tokens=out_tokens, min_new_tokens=out_tokens,
                do_sample=False, pad_token_id=pad, streamer=clock,
            )  # fmt: skip
            first, last = clock.times[1], clock.times[-1]
            ttfts += [first - t0] * len(group)
            tpots += [(last - first) / (out_tokens - 1)] * len(group)
            tokens += out[:, width:].tolist()
        wall = time.perf_counter() - t0
    n_out = sum(len(t) for t in tokens)
    return {
        "engine": f"transformers {dtype} (batch {batch})",
        "wall_s": wall,
        "output_tokens": n_out,
        "output_tok_s": n_out / wall,
        "mean_ttft_s": sum(ttfts) / len(ttfts),
        "mean_tpot_s": sum(tpots) / len(tpots),
        "tokens": tokens,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--min-prompt", type=int, default=32)
    ap.add_argument("--max-prompt", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtypes", default="float32,bfloat16", help="ours, comma-separated")
    ap.add_argument("--hf-dtypes", default="float32", help="transformers; empty to skip")
    ap.add_argument("--hf-batch", type=int, default=16)
    ap.add_argument("--max-num-batched-tokens", type=int, default=512)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--kv-cache-gib", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from ayo.engines.llm.loader import load_model, load_tokenizer, resolve_model_path

    path = resolve_model_path(MODEL)
    loaded = load_model(path)
    tokenizer = load_tokenizer(loaded)
    prompts = workload(
        args.requests, args.min_prompt, args.max_prompt, args.seed, loaded.config.vocab_size
    )
    bandwidth = copy_bandwidth()
    rows = []
    for dtype in filter(None, args.dtypes.split(",")):
        print(f"running ayo {dtype} ...", file=sys.stderr, flush=True)
        row = asyncio.run(run_ours(prompts, args.output_tokens, dtype, args, loaded, tokenizer))
        limit = bandwidth / row["weight_bytes"]  # decode steps/s if only weights were read
        row["batch1_tok_s"] = 1 / row["batch1_tpot_s"]
        row["decode_limit_tok_s"] = limit
        row["batch1_fraction_of_limit"] = row["batch1_tok_s"] / limit
        rows.append(row)
        print(f"  {row['output_tok_s']:.1f} tok/s in {row['wall_s']:.0f} s", file=sys.stderr)
    for dtype in filter(None, args.hf_dtypes.split(",")):
        print(f"running transformers {dtype} ...", file=sys.stderr, flush=True)
        rows.append(run_hf(prompts, args.output_tokens, dtype, args.hf_batch, path))
    report(rows, args, bandwidth, prompts)


def report(rows, args, bandwidth, prompts) -> None:
    lens = [len(p) for p in prompts]
    print(f"\nSmolLM2-135M-Instruct (GGUF Q4_1 dequantized) on {machine()}")
    print(
        f"{args.requests} requests, prompts {min(lens)}-{max(lens)} tokens (mean "
        f"{sum(lens) / len(lens):.0f}), {args.output_tokens} output tokens, greedy; "
        f"memory copy {bandwidth / 1e9:.1f} GB/s (read + write)\n"
    )
    base = {r["engine"].split()[1]: r for r in rows if r["engine"].startswith("transformers")}
    head = (
        f"{'engine':32} {'out tok/s':>10} {'vs HF':>7} {'TTFT ms':>9} {'TPOT ms':>8} {'agree':>6}"
    )
    print(head + f" {'b1 tok/s':>9} {'limit':>7} {'frac':>6}")
    print("-" * (len(head) + 24))
    for r in rows:
        ref = base.get(r["engine"].split()[1]) or next(iter(base.values()), None)
        ratio = r["output_tok_s"] / ref["output_tok_s"] if ref else float("nan")
        agree = "-"
        if ref and r is not ref:
            same = sum(a == b for x, y in zip(r["tokens"], ref["tokens"]) for a, b in zip(x, y))
            agree = f"{same / sum(len(x) for x in ref['tokens']):.0%}"
        line = (
            f"{r['engine']:32} {r['output_tok_s']:10.1f} {ratio:6.2f}x "
            f"{r['mean_ttft_s'] * 1e3:9.0f} {r['mean_tpot_s'] * 1e3:8.1f} {agree:>6}"
        )
        if "batch1_tok_s" in r:
            line += (
                f" {r['batch1_tok_s']:9.1f} {r['decode_limit_tok_s']:7.1f} "
                f"{r['batch1_fraction_of_limit']:6.0%}"
            )
        print(line)
    print(
        "\nvs HF: output tokens/s over transformers' in the same dtype (else the first HF row); "
        "agree: greedy tokens equal position by position to that row;\nb1: ours at batch 1 "
        "(128-token prompt, 64 tokens); limit: copy bandwidth / weight bytes per step."
    )
    if args.json:
        out = {
            "machine": machine(),
            "args": vars(args),
            "copy_bandwidth_Bps": bandwidth,
            "rows": [{k: v for k, v in r.items() if k != "tokens"} for r in rows],
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
