"""Benchmark: Ayo's LLM engine vs transformers ``generate``, and its weights formats vs
llama.cpp, on SmolLM2-135M-Instruct (GGUF Q4_1).

    python -m benchmarks.llm_engine [--requests 64] [--output-tokens 128] [--json out.json]
    python -m benchmarks.llm_engine --peers llama.cpp [--weights fp32,int8,int4]

``--peers llama.cpp``: each of our weights formats (``--weights``) against llama.cpp on the
same GGUF in the same run (``llama-cpp-python`` 0.3.36 built from source into
``.venv-llamacpp`` on first use, ~10 minutes on 2 cores): batch-1 decode tok/s (128-token
prompt, 64 greedy tokens), 512-token prefill tok/s, and ``--concurrent`` requests of the
workload (``--output-tokens`` each; ours batched, llama.cpp's Python API one after another),
with the bytes each reads per decoded token and the read limit that puts on batch-1 decode
(the machine's read bandwidth over those bytes). Ours also: greedy token agreement with our
fp32 on the concurrent requests, and the memory its weights take.

Workload: ``--requests`` prompts of random token ids with lengths drawn uniformly in
[--min-prompt, --max-prompt] (seeded), ``--output-tokens`` greedy tokens each (end-of-sequence
ignored, so both sides produce exactly that many). All requests arrive at t=0.
Theirs: transformers ``generate`` in left-padded batches of each of ``--hf-batches`` (the best
is reported), same weights, same dtype, same greedy settings. Ours: one ``generate`` call
(continuous batching, chunked prefill) with ``max_num_seqs`` equal to transformers' best batch,
so both sides run under the same batch cap. Both sides also: batch-1 decode tok/s (128-token
prompt, 64 tokens) against the decode limit (read bandwidth / weight bytes per step, measured
at the same thread count; the copy bandwidth is reported too), prefill tok/s of one 512-token
prompt, and torch ops per decoder layer of one batch-1 decode step (``torch.profiler``,
top-level aten ops / layers).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import random
import sys
import time
from pathlib import Path

import torch

from ayo.engines.llm.config import amx_bf16, cpu_model
from ayo.engines.llm.formats import WEIGHT_FORMATS

from .common import peer_venv, print_table

os.environ.setdefault("HF_HUB_OFFLINE", "1")
MODEL = "smollm2-135m-instruct"


def memory_bandwidth(mib: int = 256, reps: int = 10) -> tuple[float, float]:
    """(copy, read) bytes/s at torch's thread count, best of ``reps`` each: a large tensor copy
    counting read + write, and a sum over it, which only reads, as a decode step reads its
    weights. The decode limit is the read figure over the weight bytes."""
    src = torch.ones(mib * 2**20 // 4)
    dst = torch.empty_like(src)

    def best(fn) -> float:
        fastest = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            fastest = min(fastest, time.perf_counter() - t)
        return fastest

    nbytes = src.numel() * 4
    return 2 * nbytes / best(lambda: dst.copy_(src)), nbytes / best(src.sum)


def ops_per_layer(step, num_layers: int) -> float:
    """Top-level aten ops of one call of ``step`` (a decode step), per decoder layer."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    top = [e for e in prof.events() if e.cpu_parent is None and e.name.startswith("aten::")]
    return len(top) / num_layers


def workload(n: int, lo: int, hi: int, seed: int, vocab: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(100, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def machine() -> str:
    name = cpu_model()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    amx = "AMX bf16" if amx_bf16() else "no AMX"
    return (
        f"{name} ({amx}), {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, load {load:.1f}"
    )


async def run_ours(prompts, out_tokens, dtype, cap, args, loaded, tokenizer) -> dict:
    from ayo.engines.llm import EngineConfig, LLMEngine, SamplingParams
    from ayo.engines.llm.model import LlamaModel

    config = EngineConfig(
        dtype=dtype,
        kv_cache_gib=args.kv_cache_gib,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=cap,
        enable_prefix_caching=False,  # the batch-1 and prefill probes reuse workload prompts
    )
    model = LlamaModel(loaded.config, loaded.weights, config.torch_dtype, config.attention)
    params = SamplingParams(max_tokens=out_tokens, ignore_eos=True)
    async with LLMEngine(model, tokenizer, config) as eng:
        await eng.generate(prompts[0][:32], SamplingParams(max_tokens=4, ignore_eos=True))  # warm
        t = time.perf_counter()
        results = await eng.generate(prompts, params)
        wall = time.perf_counter() - t
        single = min(
            [
                (
                    await eng.generate(
                        prompts[0][:128], SamplingParams(max_tokens=64, ignore_eos=True)
                    )
                )[0]
                for _ in range(2)
            ],
            key=lambda r: r.time_per_output_token_s,
        )
        long = [p for p in prompts if len(p) >= 512][:1] or [(prompts[0] * 512)[:512]]
        prefill = []
        for _ in range(2):
            (r,) = await eng.generate(long[0][:512], SamplingParams(max_tokens=1, ignore_eos=True))
            prefill.append(512 / r.time_to_first_token_s)
        stats = eng.stats()
    n_out = sum(len(r.token_ids) for r in results)
    return {
        "engine": f"ayo {dtype} (cap {cap})",
        "dtype": dtype,
        "wall_s": wall,
        "output_tokens": n_out,
        "output_tok_s": n_out / wall,
        "mean_ttft_s": sum(r.time_to_first_token_s for r in results) / len(results),
        "mean_tpot_s": sum(r.time_per_output_token_s for r in results) / len(results),
        "batch1_tok_s": 1 / single.time_per_output_token_s,
        "prefill512_tok_s": max(prefill),
        "ops_per_layer": our_ops_per_layer(model),
        "weight_bytes": model.weight_bytes,
        "preemptions": stats.preemptions,
        "tokens": [r.token_ids for r in results],
    }


def our_ops_per_layer(model) -> float:
    """One batch-1 decode step at a 129-token context through the engine's own runner."""
    from ayo.engines.llm import EngineConfig
    from ayo.engines.llm.runner import ModelRunner
    from ayo.engines.llm.scheduler import ScheduledChunk
    from ayo.engines.llm.sequence import Sequence

    runner = ModelRunner(model, EngineConfig(dtype=str(model.dtype).split(".")[1]), num_blocks=16)
    seq = Sequence(0, list(range(100, 229)))
    seq.block_table = list(range(9))
    chunks = [ScheduledChunk(seq, 128, 1)]
    return ops_per_layer(lambda: runner.run(chunks), model.config.num_layers)


class _Clock:
    """A transformers streamer that records when each generation step's tokens arrive."""

    def __init__(self):
        self.times: list[float] = []

    def put(self, value) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def load_hf(path, dtype):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=getattr(torch, dtype)
    ).eval()
    hf.generation_config.eos_token_id = None
    return hf


def run_hf(hf, prompts, out_tokens, dtype, batch) -> dict:
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
        "dtype": dtype,
        "batch": batch,
        "wall_s": wall,
        "output_tokens": n_out,
        "output_tok_s": n_out / wall,
        "mean_ttft_s": sum(ttfts) / len(ttfts),
        "mean_tpot_s": sum(tpots) / len(tpots),
        "tokens": tokens,
    }


def hf_single(hf, prompts) -> dict:
    """transformers' batch-1 decode (128-token prompt, 64 tokens), 512-token prefill and ops
    per layer of one decode step with its KV cache."""
    prompt = torch.tensor([prompts[0][:128]])
    best = float("inf")
    with torch.inference_mode():
        for _ in range(2):
            clock = _Clock()
            hf.generate(prompt, max_new_tokens=64, min_new_tokens=64, do_sample=False,
                        pad_token_id=2, streamer=clock)  # fmt: skip
            best = min(best, (clock.times[-1] - clock.times[1]) / 63)
        long = torch.tensor([((prompts[0] * 512)[:512])])
        prefill = 0.0
        for _ in range(2):
            t = time.perf_counter()
            hf(long, use_cache=False, logits_to_keep=1)
            prefill = max(prefill, 512 / (time.perf_counter() - t))
        # transformers 5.x renames past_key_values to cache (the old name is deprecated)
        name = "cache" if "cache" in inspect.signature(hf.forward).parameters else "past_key_values"
        out = hf(prompt, use_cache=True)
        cache = getattr(out, name, None) or out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)
        layers = hf.config.num_hidden_layers

        def step():
            hf(nxt, use_cache=True, **{name: cache})
            cache.crop(-1)  # drop the token just appended: every step sees 128 cached tokens

        ops = ops_per_layer(step, layers)
    return {"batch1_tok_s": 1 / best, "prefill512_tok_s": prefill, "ops_per_layer": ops}


# ---- our weights formats against llama.cpp --------------------------------------------------

LLAMA_CPP_PIN = "llama-cpp-python==0.3.36"  # a source build: gcc, cmake, ninja


async def run_format(fmt: str, prompts, args, loaded, tokenizer) -> dict:
    """Our engine with weights ``fmt`` (in its default activation dtype): batch-1 decode,
    512-token prefill, and ``args.concurrent`` requests batched."""
    from ayo.engines.llm import EngineConfig, LLMEngine, SamplingParams
    from ayo.engines.llm.model import LlamaModel

    config = EngineConfig(
        weights=fmt,
        kv_cache_gib=args.kv_cache_gib,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.concurrent,
        enable_prefix_caching=False,
    )
    t = time.perf_counter()
    model = LlamaModel(loaded.config, loaded.weights, config.torch_dtype, config.attention,
                       weight_format=fmt, blocks=loaded.blocks)  # fmt: skip
    load_s = time.perf_counter() - t
    async with LLMEngine(model, tokenizer, config) as eng:
        await eng.generate(prompts[0][:32], SamplingParams(max_tokens=4, ignore_eos=True))  # warm
        tpot = []
        for _ in range(3):
            (r,) = await eng.generate(
                prompts[0][:128], SamplingParams(max_tokens=64, ignore_eos=True)
            )
            tpot.append(r.time_per_output_token_s)
        single = [list(r.token_ids)]  # greedy: the same each time
        long = (prompts[0] * 512)[:512]
        prefill = []
        for _ in range(2):
            (r,) = await eng.generate(long, SamplingParams(max_tokens=1, ignore_eos=True))
            prefill.append(512 / r.time_to_first_token_s)
        t = time.perf_counter()
        batch = await eng.generate(
            prompts[: args.concurrent],
            SamplingParams(max_tokens=args.output_tokens, ignore_eos=True),
        )
        wall = time.perf_counter() - t
    return {
        "engine": f"ayo {fmt} ({config.dtype} activations)",
        "weights": fmt,
        "batch1_tok_s": 1 / min(tpot),
        "prefill512_tok_s": max(prefill),
        "concurrent_out_tok_s": sum(len(r.token_ids) for r in batch) / wall,
        "bytes_per_token": model.weight_bytes,
        "weight_memory": model.weight_bytes + model.dense_bytes,
        "dense_from": model.dense_from,
        "load_s": load_s,
        "tokens": [r.token_ids for r in batch],
        "batch1_tokens": single,
    }


def llama_cpp_python() -> Path:
    """``.venv-llamacpp``'s interpreter, with llama-cpp-python built from source on first use."""
    root = Path(__file__).resolve().parent.parent
    return peer_venv(root / ".venv-llamacpp", "import llama_cpp", [[LLAMA_CPP_PIN]])


def run_llama_cpp(path: Path, prompts, args) -> dict:
    """llama.cpp on the GGUF itself, in its own interpreter (``peers_llamacpp.py``)."""
    import subprocess
    import tempfile

    python = llama_cpp_python()
    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as scratch:
        job, result = Path(scratch) / "job.json", Path(scratch) / "result.json"
        job.write_text(json.dumps({
            "model": str(path), "threads": threads, "prompts": prompts,
            "concurrent": args.concurrent, "output_tokens": args.output_tokens,
        }))  # fmt: skip
        script = Path(__file__).resolve().parent / "peers_llamacpp.py"
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        subprocess.run([str(python), "-I", str(script), str(job), str(result)], check=True, env=env)
        row = json.loads(result.read_text())
    row["weights"] = "GGUF Q4_1 (token_embd Q8_0)"
    row["bytes_per_token"] = gguf_bytes(path)
    row["weight_memory"] = row["bytes_per_token"]
    return row


def agreement(ours: list[list[int]], ref: list[list[int]]) -> float:
    """Greedy tokens equal position by position, over all of ``ref``'s tokens."""
    same = sum(a == b for x, y in zip(ours, ref) for a, b in zip(x, y))
    return same / sum(len(y) for y in ref)


def gguf_bytes(path: Path) -> int:
    """Bytes of the GGUF's tensors: what llama.cpp reads per decoded token (the tied output
    matrix is token_embd, read whole by the output matmul; the lookup reads one row)."""
    from gguf import GGUFReader

    return sum(int(t.n_bytes) for t in GGUFReader(str(path)).tensors)


def compare_formats(args, path, loaded, tokenizer, prompts, bandwidth) -> None:
    rows = []
    for fmt in args.weights:
        print(f"running ayo {fmt} ...", file=sys.stderr, flush=True)
        rows.append(asyncio.run(run_format(fmt, prompts, args, loaded, tokenizer)))
    if "llama.cpp" in args.peers:
        print("running llama.cpp ...", file=sys.stderr, flush=True)
        rows.append(run_llama_cpp(path, prompts, args))
    ref = next((r for r in rows if r.get("weights") == "fp32"), None)
    peer = rows[-1] if "llama.cpp" in args.peers else None
    print(f"\nSmolLM2-135M-Instruct (GGUF Q4_1) on {machine()}")
    print(
        f"memory copy {bandwidth[0] / 1e9:.1f} GB/s (read + write), read {bandwidth[1] / 1e9:.1f} "
        f"GB/s at {torch.get_num_threads()} threads; batch-1: 128-token prompt, 64 tokens; "
        f"{args.concurrent} concurrent requests of {args.output_tokens} tokens\n"
    )
    table = []
    for r in rows:
        r["decode_limit_tok_s"] = bandwidth[1] / r["bytes_per_token"]
        r["batch1_fraction_of_limit"] = r["batch1_tok_s"] / r["decode_limit_tok_s"]
        agree = "-"
        if ref is not None and "tokens" in r:
            agree = "/".join(f"{agreement(r[k], ref[k]):.0%}" for k in ("batch1_tokens", "tokens"))
        table.append([
            r["engine"], f"{r['bytes_per_token'] / 1e6:.0f}", f"{r['batch1_tok_s']:.1f}",
            f"{r['decode_limit_tok_s']:.0f}", f"{r['batch1_fraction_of_limit']:.0%}",
            f"{r['batch1_tok_s'] / peer['batch1_tok_s']:.2f}x" if peer else "-",
            f"{r['prefill512_tok_s']:.0f}",
            f"{r['prefill512_tok_s'] / peer['prefill512_tok_s']:.2f}x" if peer else "-",
            f"{r['concurrent_out_tok_s']:.1f}", agree, f"{r['weight_memory'] / 1e6:.0f}",
        ])  # fmt: skip
    print_table(
        ["engine", "MB/token", "b1 tok/s", "limit", "frac", "vs llama", "pf512/s", "vs llama",
         "conc tok/s", "agree", "mem MB"],
        table,
    )  # fmt: skip
    print(
        "\nMB/token: weight bytes read per decoded token; limit: read bandwidth / those bytes "
        "(tok/s); frac: batch-1 decode as a fraction of it; pf512: prefill tok/s of one "
        "512-token prompt;\nconc: output tok/s of the concurrent requests (ours batched; "
        + (peer["concurrent_note"] if peer else "")
        + "); agree: greedy tokens equal to our fp32's, position by position, at batch 1 / in "
        "the concurrent batch;\nmem: weight memory (quantized: plus the dense copy that runs "
        "matmuls of many rows, so the concurrent batch runs on it)."
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({
                "machine": machine(), "args": vars(args), "copy_bandwidth_Bps": bandwidth[0],
                "read_bandwidth_Bps": bandwidth[1],
                "rows": [{k: v for k, v in r.items() if "tokens" not in k} for r in rows],
            }, f, indent=2)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--min-prompt", type=int, default=32)
    ap.add_argument("--max-prompt", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated, both sides")
    ap.add_argument("--hf-batches", default="16,32,64", help="transformers' batch sizes to try")
    ap.add_argument("--max-num-batched-tokens", type=int, default=512)
    ap.add_argument("--kv-cache-gib", type=float, default=2.0)
    ap.add_argument(
        "--threads", type=int, default=0, help="torch threads, both sides (0: torch's default)"
    )
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--peers", default="transformers", help="transformers (the batched "
                    "comparison above) and/or llama.cpp (the weights formats' table)")  # fmt: skip
    ap.add_argument("--weights", default="fp32,int8,int4", help="our weights formats against "
                    "llama.cpp (fp32, bf16, int8, int4)")  # fmt: skip
    ap.add_argument("--concurrent", type=int, default=16)
    args = ap.parse_args()
    args.peers = [p for p in args.peers.split(",") if p]
    args.weights = [w for w in args.weights.split(",") if w]
    if bad := [p for p in args.peers if p not in ("transformers", "llama.cpp")]:
        ap.error(f"unknown peers {bad}; choose from transformers, llama.cpp")
    if bad := [w for w in args.weights if w not in WEIGHT_FORMATS]:
        ap.error(f"unknown weights {bad}; choose from {', '.join(WEIGHT_FORMATS)}")
    if args.threads:
        torch.set_num_threads(args.threads)

    from ayo.engines.llm.loader import load_model, load_tokenizer, resolve_model_path

    path = resolve_model_path(MODEL)
    loaded = load_model(path)
    tokenizer = load_tokenizer(loaded)
    prompts = workload(
        args.requests, args.min_prompt, args.max_prompt, args.seed, loaded.config.vocab_size
    )
    bandwidth = memory_bandwidth()  # at torch's thread count now: the one both sides use
    if "llama.cpp" in args.peers:
        compare_formats(args, path, loaded, tokenizer, prompts, bandwidth)
    if "transformers" not in args.peers:
        return
    rows = []
    for dtype in filter(None, args.dtypes.split(",")):
        hf = load_hf(path, dtype)
        theirs = []
        for batch in sorted({int(b) for b in args.hf_batches.split(",")}):
            print(f"running transformers {dtype} batch {batch} ...", file=sys.stderr, flush=True)
            theirs.append(run_hf(hf, prompts, args.output_tokens, dtype, batch))
        best = max(theirs, key=lambda r: r["output_tok_s"])
        best.update(hf_single(hf, prompts))
        del hf
        print(f"running ayo {dtype} at cap {best['batch']} ...", file=sys.stderr, flush=True)
        ours = asyncio.run(
            run_ours(prompts, args.output_tokens, dtype, best["batch"], args, loaded, tokenizer)
        )
        for row in (best, ours):
            row["decode_limit_tok_s"] = bandwidth[1] / ours["weight_bytes"]
            row["batch1_fraction_of_limit"] = row["batch1_tok_s"] / row["decode_limit_tok_s"]
        rows += [ours, best] + [r for r in theirs if r is not best]
    report(rows, args, bandwidth, prompts)


def report(rows, args, bandwidth, prompts) -> None:
    lens = [len(p) for p in prompts]
    print(f"\nSmolLM2-135M-Instruct (GGUF Q4_1 dequantized) on {machine()}")
    print(
        f"{args.requests} requests, prompts {min(lens)}-{max(lens)} tokens (mean "
        f"{sum(lens) / len(lens):.0f}), {args.output_tokens} output tokens, greedy; "
        f"memory copy {bandwidth[0] / 1e9:.1f} GB/s (read + write), read {bandwidth[1] / 1e9:.1f} "
        f"GB/s, at {torch.get_num_threads()} threads\n"
    )
    best = {r["dtype"]: r for r in rows if "batch1_tok_s" in r and "batch" in r}
    head = (
        f"{'engine':32} {'out tok/s':>10} {'vs HF':>7} {'TTFT ms':>9} {'TPOT ms':>8} {'agree':>6}"
        f" {'b1 tok/s':>9} {'limit':>6} {'frac':>5} {'pf512/s':>8} {'ops/layer':>9}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        ref = best.get(r["dtype"])
        ratio = r["output_tok_s"] / ref["output_tok_s"] if ref else float("nan")
        agree = "-"
        if ref and r is not ref and "batch" not in r:
            same = sum(a == b for x, y in zip(r["tokens"], ref["tokens"]) for a, b in zip(x, y))
            agree = f"{same / sum(len(x) for x in ref['tokens']):.0%}"
        line = (
            f"{r['engine']:32} {r['output_tok_s']:10.1f} {ratio:6.2f}x "
            f"{r['mean_ttft_s'] * 1e3:9.0f} {r['mean_tpot_s'] * 1e3:8.1f} {agree:>6}"
        )
        if "batch1_tok_s" in r:
            line += (
                f" {r['batch1_tok_s']:9.1f} {r['decode_limit_tok_s']:6.1f} "
                f"{r['batch1_fraction_of_limit']:5.0%} {r['prefill512_tok_s']:8.0f} "
                f"{r['ops_per_layer']:9.1f}"
            )
        print(line)
    print(
        "\nvs HF: output tokens/s over transformers' best batch in the same dtype (ours runs "
        "with max_num_seqs = that batch); agree: greedy tokens equal position by position;\n"
        "b1: batch-1 decode (128-token prompt, 64 tokens); limit: read bandwidth / weight bytes "
        "per step (ours; the same weights); pf512: prefill tokens/s of one 512-token prompt;\n"
        "ops/layer: top-level aten ops of one batch-1 decode step / decoder layers."
    )
    ours = {r["dtype"]: r for r in rows if r["engine"].startswith("ayo")}
    if "float32" in ours and "bfloat16" in ours:
        f32, b16 = ours["float32"], ours["bfloat16"]
        print(
            f"ours bf16 / fp32 on this CPU ({'AMX bf16' if amx_bf16() else 'no AMX'}): "
            f"{b16['output_tok_s'] / f32['output_tok_s']:.2f}x throughput"
            + (
                f", {b16['batch1_tok_s'] / f32['batch1_tok_s']:.2f}x batch-1 decode"
                if "batch1_tok_s" in f32 and "batch1_tok_s" in b16
                else ""
            )
            + "; the engine library's default stays float32 (equal to transformers)."
        )
    if args.json:
        out = {
            "machine": machine(),
            "args": vars(args),
            "copy_bandwidth_Bps": bandwidth[0],
            "read_bandwidth_Bps": bandwidth[1],
            "rows": [{k: v for k, v in r.items() if k != "tokens"} for r in rows],
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
