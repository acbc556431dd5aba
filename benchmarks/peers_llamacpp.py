"""llama.cpp's side of ``python -m benchmarks.llm_engine --peers llama.cpp``, run in its own
virtual environment (``.venv-llamacpp``: ``llama-cpp-python`` built from source there).

    python peers_llamacpp.py JOB.json RESULT.json

The job names the GGUF, the thread count and the token-id prompts; the result holds llama.cpp's
batch-1 decode tok/s (a 128-token prompt, 64 greedy tokens, the best of two), its 512-token
prefill tok/s (the best of two) and its throughput on the concurrent requests, which its Python
API serves one after another (a ``Llama`` holds one sequence). Stand-alone: it imports nothing
of Ayo (not installed in that environment).
"""

from __future__ import annotations

import json
import sys
import time


def decode_time_per_token(llm, prompt: list[int], n: int) -> float:
    """Seconds per token after the first of ``n`` greedy tokens (the first includes prefill)."""
    llm.reset()
    stamps = []
    for _ in llm.generate(prompt, temp=0.0, top_k=1, reset=True):
        stamps.append(time.perf_counter())
        if len(stamps) == n:
            break
    return (stamps[-1] - stamps[0]) / (n - 1)


def main() -> None:
    from llama_cpp import Llama

    with open(sys.argv[1]) as f:
        job = json.load(f)
    llm = Llama(
        model_path=job["model"], n_threads=job["threads"], n_threads_batch=job["threads"],
        n_ctx=2048, n_batch=512, verbose=False, seed=0,
    )  # fmt: skip
    prompts = job["prompts"]
    b1 = min(decode_time_per_token(llm, prompts[0][:128], 64) for _ in range(2))
    long = (prompts[0] * 512)[:512]
    prefill = []
    for _ in range(2):
        llm.reset()
        t = time.perf_counter()
        llm.eval(long)
        prefill.append(512 / (time.perf_counter() - t))
    out_tokens, t = 0, time.perf_counter()
    for p in prompts[: job["concurrent"]]:
        llm.reset()
        for n, _ in enumerate(llm.generate(p, temp=0.0, top_k=1, reset=True), start=1):
            if n == job["output_tokens"]:
                break
        out_tokens += n
    wall = time.perf_counter() - t
    import llama_cpp

    result = {
        "engine": f"llama.cpp {llama_cpp.__version__} (GGUF as stored)",
        "batch1_tok_s": 1 / b1,
        "prefill512_tok_s": max(prefill),
        "concurrent_out_tok_s": out_tokens / wall,
        "concurrent_note": "one after another (llama-cpp-python serves one sequence)",
    }
    with open(sys.argv[2], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
