"""Measured profiles of the embedded engines: ``python -m ayo profile``.

The passes (stage decomposition, the prefill split) and the critical-path policy read an
:class:`~ayo.scheduler.profile.EngineProfile` per engine; without one they fall back to the
constants in ``scheduler/profile.py``. This measures the real LLM and embedder on this machine,
fits the same latency model (``scheduler/profiler.py``), prints it beside those constants and
stores it in the data directory, keyed by machine, model, dtype and thread count
(:func:`profile_path`), where the server reads it at start (:func:`stored_profiles`).

LLM samples: a decode step of ``b`` sequences (``items = b``, one token each: the mean step of
an 8-token decode of all of them) and a prefill of ``t`` tokens of one sequence (``items = 1,
tokens = t``); the fit ``fixed + per_item * items + per_token * items * tokens`` then gives a
decode step of one sequence as ``fixed + per_item + per_token`` and a prefill's cost per token.
Embedder samples: a batch of ``b`` texts of about 16 words.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import statistics
import time
from pathlib import Path
from typing import Any

from ayo.engines.llm.config import cpu_model
from ayo.scheduler.profile import DEFAULT_PROFILES, EngineProfile
from ayo.scheduler.profiler import Sample, load_profiles, profile_from

log = logging.getLogger(__name__)

DECODE_BATCHES = (1, 2, 4, 8, 16)
PREFILL_TOKENS = (32, 128, 512)
EMBED_BATCHES = (1, 4, 16, 32)
DECODE_STEPS = 8


async def measure_llm(
    engine: Any,
    decode_batches: tuple[int, ...] = DECODE_BATCHES,
    prefill_tokens: tuple[int, ...] = PREFILL_TOKENS,
    repeats: int = 3,
) -> list[Sample]:
    """Median decode-step and prefill latencies of a started ``LLMEngine`` (after a warm-up)."""
    from ayo.engines.llm import SamplingParams

    vocab = engine.model.config.vocab_size
    params = SamplingParams(max_tokens=DECODE_STEPS, ignore_eos=True)

    def tokens(n: int, salt: int) -> list[int]:  # distinct prompts: no prefix-cache hits
        return [(7919 * salt + 31 * i + 1) % vocab for i in range(n)]

    salt = 0

    async def decode_step_ms(batch: int) -> float:
        nonlocal salt
        seqs = []
        for _ in range(batch):
            salt += 1
            seqs.append(await engine.open(tokens(32, salt)))
        t0 = time.perf_counter()
        await asyncio.gather(*(_drain(engine.decode(s, params)) for s in seqs))
        elapsed = time.perf_counter() - t0
        await asyncio.gather(*(engine.close(s) for s in seqs))
        return elapsed * 1e3 / DECODE_STEPS

    async def prefill_ms(n: int) -> float:
        nonlocal salt
        salt += 1
        seq = await engine.open()
        t0 = time.perf_counter()
        await engine.prefill(seq, tokens(n, salt))
        elapsed = time.perf_counter() - t0
        await engine.close(seq)
        return elapsed * 1e3

    samples = []
    for batch in decode_batches:
        await decode_step_ms(batch)
        ms = statistics.median([await decode_step_ms(batch) for _ in range(repeats)])
        samples.append(Sample(batch, 1, ms))
    for n in prefill_tokens:
        await prefill_ms(n)
        ms = statistics.median([await prefill_ms(n) for _ in range(repeats)])
        samples.append(Sample(1, n, ms))
    return samples


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


async def measure_embedder(
    embedder: Any, batches: tuple[int, ...] = EMBED_BATCHES, repeats: int = 3
) -> list[Sample]:
    """Median latency of an ``Embedder.embed`` batch of ``b`` texts of 16 words each."""
    words = "the quick brown fox jumps over the lazy dog near a river bank in early spring light"

    async def batch_ms(b: int, salt: int) -> float:
        texts = [f"{words} {salt} {i}" for i in range(b)]
        t0 = time.perf_counter()
        await embedder.embed(texts)
        return (time.perf_counter() - t0) * 1e3

    samples = []
    for b in batches:
        await batch_ms(b, -1)
        ms = statistics.median([await batch_ms(b, r) for r in range(repeats)])
        samples.append(Sample(b, 0, ms))  # one text length: its cost is per item
    return samples


def profile_path(data_dir: Path, model: str, dtype: str, threads: int) -> Path:
    """Where a profile of this machine, model, dtype and thread count is stored."""
    key = f"{cpu_model()}|{model}|{dtype}|{threads}"
    slug = re.sub(r"[^a-z0-9]+", "-", f"{model}-{dtype}-{threads}t".lower()).strip("-")
    return data_dir / "profiles" / f"{slug}-{hashlib.sha1(key.encode()).hexdigest()[:8]}.json"


def stored_profiles(
    data_dir: Path, model: str, dtype: str, threads: int
) -> dict[str, EngineProfile]:
    """The profiles ``python -m ayo profile`` stored for this machine, model, dtype and thread
    count, or {} (the constants then apply) when there are none or the file is unreadable."""
    path = profile_path(data_dir, model, dtype, threads)
    if not path.exists():
        log.info("no engine profile measured for %s %s at %d threads on this machine: the "
                 "plans use the constants (`python -m ayo profile` measures one in ~30 s)",
                 model, dtype, threads)  # fmt: skip
        return {}
    try:
        profiles = load_profiles(path)
    except (OSError, ValueError) as exc:
        log.warning("ignoring the engine profile %s: %s", path, exc)
        return {}
    log.info("engine profiles measured on this machine: %s (%s)", path, ", ".join(profiles))
    return profiles


def profile_rows(measured: dict[str, EngineProfile]) -> list[list[object]]:
    """One row per engine: the measured model and, beside it, the constant it replaces."""
    rows: list[list[object]] = []
    for name, p in measured.items():
        for source, prof in (("measured", p), ("constant", DEFAULT_PROFILES[name])):
            lat = prof.latency
            rows.append(
                [name if source == "measured" else "", source, f"{lat.fixed_ms:.2f}",
                 f"{lat.per_item_ms:.3f}", f"{lat.per_token_ms:.4f}", prof.efficient_batch,
                 prof.prefill_split_min_tokens if name == "llm" else "-",
                 f"{lat.estimate_ms(1, 1):.1f}" if name == "llm" else "-"]
            )  # fmt: skip
    return rows


PROFILE_HEADERS = [
    "engine", "source", "fixed ms", "per item ms", "per token ms", "efficient batch",
    "split min tokens", "decode step ms",
]  # fmt: skip


async def profile_default_engines(
    model: str, dtype: str, threads: int | None
) -> tuple[dict[str, EngineProfile], dict[str, list[Sample]], str]:
    """Load the LLM and the embedder, measure them, and fit their profiles. Returns the
    profiles, the samples and the LLM's resolved dtype."""
    from ayo.engines import Embedder
    from ayo.engines.llm import LLMEngine

    llm = await LLMEngine.load(model, dtype=dtype, num_threads=threads)
    samples: dict[str, list[Sample]] = {}
    async with llm:
        samples["llm"] = await measure_llm(llm)
    embedder = await asyncio.to_thread(Embedder.from_model)
    try:
        samples["embedder"] = await measure_embedder(embedder)
    finally:
        await asyncio.to_thread(embedder.close)
    profiles = {
        "llm": profile_from(samples["llm"], llm=True),
        "embedder": profile_from(samples["embedder"]),
    }
    return profiles, samples, llm.config.dtype
