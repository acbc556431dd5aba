"""Does ``torch.compile`` pay for the LLM's decode step on this machine? Same run, same model.

    python -m benchmarks.llm_compile [--dtypes float32,bfloat16] [--batches 1] [--threads 2]

For each dtype and batch size: the engine's eager step (oneDNN linear on weights packed once,
the default on CPU), the same eager step with ``F.linear`` over plain weights, and
``torch.compile(model.forward, dynamic=True)`` (Inductor) over plain weights, with and without
Inductor's ``freezing``. The F.linear row separates what compiling adds from what the matmul
library does: on the Intel Xeon VM (AMX) in float32 at batch 1, compiled and eager F.linear
both take ~25 ms against the packed linear's ~31. Reported: the first call (the compile,
paid at start-up per shape family) and the median step over 40 decode steps whose context
grows by one token each, as in real decoding (so a compile that specializes on the length would
show its recompiles). The packed oneDNN weights cannot go into the compiled graph: Inductor's
oneDNN linear lowering takes only weights that are graph constants, which ``freezing`` makes
of ``nn.Module`` parameters, not of the engine's tensors. About 4 minutes per dtype and batch
size on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from ayo.engines.llm import EngineConfig
from ayo.engines.llm.loader import load_model, resolve_model_path
from ayo.engines.llm.model import LlamaModel
from ayo.engines.llm.runner import ModelRunner
from ayo.engines.llm.scheduler import ScheduledChunk
from ayo.engines.llm.sequence import Sequence

from .common import machine, print_table

MODES = ("eager (engine)", "eager, F.linear", "compiled", "compiled + freezing")
PROMPT = 128


def build(loaded, dtype: str, mode: str, batch: int) -> tuple[ModelRunner, list[Sequence]]:
    cfg = EngineConfig(dtype=dtype)
    packed = mode == MODES[0]
    model = LlamaModel(
        loaded.config, loaded.weights, cfg.torch_dtype, cfg.attention, packed_linear=packed
    )
    if mode.startswith("compiled"):
        import torch._inductor.config as inductor

        inductor.freezing = mode == MODES[3]
        torch._dynamo.reset()
        model.forward = torch.compile(model.forward, dynamic=True)
    blocks = (PROMPT + 64) // cfg.block_size + 1
    runner = ModelRunner(model, cfg, num_blocks=blocks * batch)
    seqs = []
    for i in range(batch):
        seq = Sequence(i, [(100 + 7 * i + t) % 1000 for t in range(PROMPT + 64)])
        seq.block_table = list(range(i * blocks, (i + 1) * blocks))
        seqs.append(seq)
    return runner, seqs


def measure(loaded, dtype: str, mode: str, batch: int) -> dict[str, float]:
    """First call (compile) and median decode step, the context growing one token a step."""
    runner, seqs = build(loaded, dtype, mode, batch)

    def step(context: int) -> float:
        t = time.perf_counter()
        runner.run([ScheduledChunk(s, context - 1, 1) for s in seqs])
        return time.perf_counter() - t

    first = step(PROMPT)
    step(PROMPT + 1)  # a second length: dynamic shapes settle (one recompile at most)
    steps = sorted(step(PROMPT + 2 + i) for i in range(40))
    return {"first_call_s": first, "step_ms": steps[len(steps) // 2] * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--batches", default="1")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache-dir", default=None, help="Inductor's cache (default: a fresh "
                    "temporary folder, so the first call is what a first start pays)")  # fmt: skip
    args = ap.parse_args()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = args.cache_dir or tempfile.mkdtemp(prefix="inductor-")
    torch.set_num_threads(args.threads)
    loaded = load_model(resolve_model_path("smollm2-135m-instruct"))
    rows = []
    for dtype in args.dtypes.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            base = None
            for mode in MODES:
                r = measure(loaded, dtype, mode, batch)
                base = base or r["step_ms"]
                print(dtype, batch, mode, r, flush=True)
                rows.append(
                    [dtype, batch, mode, f"{r['first_call_s']:.1f}", f"{r['step_ms']:.1f}",
                     f"{base / r['step_ms']:.2f}x"]
                )  # fmt: skip
    print(f"\nSmolLM2-135M-Instruct decode step on {machine()}")
    print_table(["dtype", "batch", "forward", "first call s", "step ms", "vs eager"], rows)


if __name__ == "__main__":
    main()
