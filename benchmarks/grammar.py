"""Grammar libraries for structured output, measured where the engine pays for them:
``python -m benchmarks.grammar [--libs xgrammar,llguidance] [--no-engine]``.

For xgrammar and llguidance on the embedded LLM's tokenizer: the cold compile time of a JSON
schema and of free JSON (``json_object``), and the per-step cost of constrained decoding at batch
1 and 16: every sequence's matcher fills its row of the token bitmask, the bitmask is applied to
the batch's logits in one operation, and each matcher accepts its token. The sequences walk the
tokens of a valid document. Next to it, the engine's own decode step at the same batch sizes
(``--no-engine`` skips loading it), so the table says what fraction of a step the grammar adds.
The mask is computed on the CPU by both libraries (on a GPU too); its cost is bounded by the
grammar's state count and the vocabulary (49152 tokens here), not by the model.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import time
from collections.abc import Callable
from statistics import median

import torch

import ayo.kernels as K

from .common import machine, print_table, setup_benchmark_logging

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        "city": {"enum": ["Paris", "Rome", "Oslo"]},
    },
    "required": ["name", "age", "tags", "city"],
    "additionalProperties": False,
}
DOCUMENT = {"name": "Ada Lovelace", "age": 36, "tags": ["maths", "engines"], "city": "Rome"}


class Lib:
    """One grammar library behind the three calls a step makes."""

    name: str
    vocab: int

    def compile(self, schema: dict | None) -> object: ...
    def matcher(self, compiled: object) -> object: ...
    def bitmask(self, batch: int) -> torch.Tensor: ...
    def fill(self, matcher: object, bitmask: torch.Tensor, row: int) -> None: ...
    def accept(self, matcher: object, token: int) -> None: ...

    def apply(self, logits: torch.Tensor, bitmask: torch.Tensor) -> None:
        """What the engine applies either library's mask with: one kernel call for the batch."""
        K.apply_token_bitmask(logits, bitmask)


class XGrammar(Lib):
    name = "xgrammar"

    def __init__(self, hf: object, vocab: int) -> None:
        import xgrammar as xgr

        self.xgr = xgr
        self.vocab = vocab
        self.info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=vocab)

    def compile(self, schema: dict | None) -> object:
        compiler = self.xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        if schema is None:
            return compiler.compile_builtin_json_grammar()
        return compiler.compile_json_schema(json.dumps(schema), strict_mode=True)

    def matcher(self, compiled: object) -> object:
        return self.xgr.GrammarMatcher(compiled)

    def bitmask(self, batch: int) -> torch.Tensor:
        return self.xgr.allocate_token_bitmask(batch, self.vocab)

    def fill(self, matcher: object, bitmask: torch.Tensor, row: int) -> None:
        matcher.fill_next_token_bitmask(bitmask, row)

    def accept(self, matcher: object, token: int) -> None:
        if not matcher.accept_token(token):
            raise AssertionError(f"xgrammar refused token {token}")


class LLGuidance(Lib):
    name = "llguidance"

    def __init__(self, hf: object, vocab: int) -> None:
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self.ll = llguidance
        self.vocab = vocab
        self.tok = llguidance.hf.from_tokenizer(hf, n_vocab=vocab)

    def compile(self, schema: dict | None) -> object:
        grammar = self.ll.LLMatcher.grammar_from_json_schema(
            json.dumps(schema if schema is not None else {"type": "object"})
        )
        m = self.ll.LLMatcher(self.tok, grammar)  # compiles lazily: the first mask builds it
        if m.is_error():
            raise ValueError(m.get_error())
        m.compute_bitmask()
        return grammar

    def matcher(self, compiled: object) -> object:
        return self.ll.LLMatcher(self.tok, compiled)

    def bitmask(self, batch: int) -> torch.Tensor:
        return self.ll.torch.allocate_token_bitmask(batch, self.vocab)

    def fill(self, matcher: object, bitmask: torch.Tensor, row: int) -> None:
        self.ll.torch.fill_next_token_bitmask(matcher, bitmask, row)

    def accept(self, matcher: object, token: int) -> None:
        if not matcher.consume_token(token):
            raise AssertionError(f"llguidance refused token {token}: {matcher.get_error()}")


def _time(fn: Callable[[], object], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return median(times)


def step_costs(lib: Lib, tokens: list[int], batch: int) -> tuple[float, float]:
    """Median (fill + accept, apply) seconds per step of ``batch`` sequences walking
    ``tokens``."""
    compiled = lib.compile(SCHEMA)
    matchers = [lib.matcher(compiled) for _ in range(batch)]
    bitmask = lib.bitmask(batch)
    logits = torch.randn(batch, lib.vocab)
    fills, applies = [], []
    for tok in tokens:
        t0 = time.perf_counter()
        for i, m in enumerate(matchers):
            lib.fill(m, bitmask, i)
        t1 = time.perf_counter()
        lib.apply(logits, bitmask)
        t2 = time.perf_counter()
        for m in matchers:
            lib.accept(m, tok)
        t3 = time.perf_counter()
        fills.append((t1 - t0) + (t3 - t2))
        applies.append(t2 - t1)
    return median(fills), median(applies)


async def engine_steps(batches: list[int]) -> dict[int, float]:
    """The LLM's median time per decode step with ``batch`` sequences decoding together."""
    from ayo.engines.llm import LLMEngine, SamplingParams

    out = {}
    async with LLMEngine.from_model("smollm2-135m-instruct", num_threads=1) as llm:
        params = SamplingParams(max_tokens=24, ignore_eos=True)
        await llm.generate("warm up", params)
        for batch in batches:
            results = await llm.generate(
                [f"Tell me about number {i}." for i in range(batch)], params
            )
            out[batch] = median(r.time_per_output_token_s for r in results)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--libs", default="xgrammar,llguidance")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--no-engine", action="store_true", help="skip the engine's step time")
    args = parser.parse_args(argv)
    setup_benchmark_logging()
    torch.set_num_threads(1)
    from ayo.runtime.defaults import default_tokenizer

    hf = default_tokenizer().hf
    vocab = 49152  # the model's embedding rows (the tokenizer's vocabulary, padded)
    doc_tokens = hf(json.dumps(DOCUMENT), add_special_tokens=False)["input_ids"]
    batches = [int(b) for b in args.batches.split(",")]
    libs = {"xgrammar": XGrammar, "llguidance": LLGuidance}
    steps = {} if args.no_engine else asyncio.run(engine_steps(batches))
    print(f"# {machine()}; vocabulary {vocab}; document of {len(doc_tokens)} tokens; 1 thread")
    rows = []
    for name in args.libs.split(","):
        lib = libs[name](hf, vocab)
        label = f"{name} {importlib.metadata.version(name)}"
        compile_schema = _time(lambda lib=lib: lib.compile(SCHEMA))
        compile_free = _time(lambda lib=lib: lib.compile(None))
        for batch in batches:
            fill, apply = step_costs(lib, doc_tokens, batch)
            step = steps.get(batch)
            share = f"{(fill + apply) / step:.1%}" if step else "-"
            rows.append([
                label, f"{compile_schema * 1e3:.1f}", f"{compile_free * 1e3:.1f}", batch,
                f"{fill * 1e6:.0f}", f"{apply * 1e6:.0f}",
                f"{step * 1e3:.1f}" if step else "-", share,
            ])  # fmt: skip
    print_table(
        ["library", "compile schema ms", "compile json ms", "batch", "mask+accept us",
         "apply us", "engine step ms", "share of step"],
        rows,
    )  # fmt: skip


if __name__ == "__main__":
    main()
