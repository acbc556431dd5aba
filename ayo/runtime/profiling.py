"""Measured profiles of the engines: at the server's first start, and ``python -m ayo profile``.

The passes (stage decomposition, the prefill split) and the critical-path policy read an
:class:`~ayo.scheduler.profiles.profile.EngineProfile` per engine; without one they fall back to the
constants in ``scheduler/profiles/profile.py``. This measures the real engines on this machine (the LLM,
the embedder, the reranker, and the dense and keyword indexes when their collection exists),
fits the same latency model (``scheduler/profiles/profiler.py``) and stores it in the data directory,
keyed by machine, model, dtype and thread count (:func:`profile_path`).
:func:`ensure_profiles` loads a stored profile or, the first time, measures one (a few
seconds: the quick shapes) and gives it to the App; ``python -m ayo profile`` re-measures with
more shapes and prints the table beside the constants.

LLM samples: a decode step of ``b`` sequences (``items = b``, one token each: the mean step of
an 8-token decode of all of them) and a prefill of ``t`` tokens of one sequence (``items = 1,
tokens = t``); the fit ``fixed + per_item * items + per_token * items * tokens`` then gives a
decode step of one sequence as ``fixed + per_item + per_token`` and a prefill's cost per token.
Embedder samples: a batch of ``b`` texts of about 16 words. Reranker: one query over ``b``
passages (its items). Indexes: ``b`` queries (their items), 32 hits each; the dense index's
``Ingest`` too (``"index.Ingest"``: ``b`` vectors added to a query's collection), which costs
differently from a search (stage decomposition weighs it).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import re
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ayo.engines.llm.config import cpu_model
from ayo.scheduler.ir.engine_api import engine_kind
from ayo.scheduler.profiles.profile import DEFAULT_PROFILES, EngineProfile
from ayo.scheduler.profiles.profiler import (
    Sample,
    load_profiles,
    measure,
    profile_from,
    save_profiles,
)

log = logging.getLogger(__name__)

DECODE_BATCHES = (1, 2, 4, 8, 16)
PREFILL_TOKENS = (32, 128, 512)
EMBED_BATCHES = (1, 4, 16, 32)
RERANK_PASSAGES = (4, 16, 32)
SEARCH_BATCHES = (1, 8, 32)
INGEST_BATCHES = (16, 64, 256)
PROFILE_COLLECTION = "ayo-profile/ingest"  # a per-query collection, dropped after
DECODE_STEPS = 8
# At a server's first start: a few seconds in all, progress logged per engine.
QUICK = {"decode_batches": (1, 4, 16), "prefill_tokens": (64, 512), "repeats": 1}
WORDS = "the quick brown fox jumps over the lazy dog near a river bank in early spring light"
# The embedder and the reranker are measured on what they mostly see: passages, the apps' chunks
# of up to 64 words (a short text costs a fraction of one).
PASSAGE = " ".join([WORDS] * 4)
# Bumped when what is measured changes: a profile stored by an older version is measured anew.
PROFILE_FORMAT = 2


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


async def _batch_runner(kind: str, engine: Any, embedder: Any | None) -> Any:
    """``run(b, tokens)`` for ``scheduler/profiles/profiler.py``'s ``measure``: one batch of
    ``b`` items on a retrieval engine of ``kind``, each call's texts new (None: not measured).
    One text length, so an item's cost is per item."""
    from ayo.engines.records import Doc, RerankRequest

    calls = itertools.count()
    if kind == "embedder":
        return lambda b, _: engine.embed(
            [f"{next(calls)} {i} {PASSAGE}" for i in range(b)], info=None
        )
    if kind == "reranker":
        docs = tuple(Doc(str(i), f"{i} {PASSAGE}") for i in range(max(RERANK_PASSAGES)))
        return lambda b, _: engine.rerank(
            [RerankRequest(f"river {next(calls)}", docs[:b], 3)], info=None
        )
    if kind == "keyword":
        return lambda b, _: engine.search(
            [f"river {next(calls)} {i}" for i in range(b)], 32, info=None
        )
    if kind == "index" and embedder is not None:
        texts = [f"{WORDS} {i}" for i in range(max(SEARCH_BATCHES))]
        vectors = await embedder.embed(texts, info=None)
        return lambda b, _: engine.search("default", vectors[:b], 32, info=None)
    return None


def _ingest_runner(engine: Any, vectors: Any) -> Any:
    """``run(b, tokens)``: ``b`` vectors added to a fresh per-query collection, then dropped."""
    from ayo.engines.records import Doc

    calls = itertools.count()

    async def run(b: int, _: int) -> None:
        name = f"{PROFILE_COLLECTION}/{next(calls)}"
        docs = [Doc(str(i), f"{WORDS} {i}") for i in range(b)]
        try:
            await engine.ingest(name, docs, vectors[:b], info=None)
        finally:
            await engine.drop(name)

    return run


BATCHES = {"embedder": EMBED_BATCHES, "reranker": RERANK_PASSAGES}


async def measure_engines(
    engines: Mapping[str, Any],
    embedder: Any | None = None,
    *,
    quick: bool = False,
    progress: Callable[[str], None] = log.info,
) -> dict[str, list[Sample]]:
    """Samples per engine kind of ``engines`` (an App's instances by name; one instance per
    kind is measured). ``embedder`` makes the dense index's query vectors. An index whose
    collection is missing is left out (its constants stay)."""
    by_kind: dict[str, Any] = {}
    for engine in engines.values():
        by_kind.setdefault(engine_kind(engine), engine)
    repeats = QUICK["repeats"] if quick else 3
    samples: dict[str, list[Sample]] = {}
    for n, (kind, engine) in enumerate(by_kind.items(), 1):
        progress(f"profiling engine {n}/{len(by_kind)}: {kind}")
        if kind == "llm":
            shapes = QUICK if quick else {}
            samples[kind] = await measure_llm(engine, **shapes)
            continue
        run = await _batch_runner(kind, engine, embedder)
        if run is None:
            continue
        batches = BATCHES.get(kind, SEARCH_BATCHES)
        try:
            shapes = batches[:3] if quick else batches
            samples[kind] = await measure(run, shapes, (0,), repeats)
        except ValueError as exc:  # an index whose collection is not ingested
            progress(f"not profiling {kind}: {exc}")
        if kind == "index" and embedder is not None and hasattr(engine, "drop"):
            vectors = await embedder.embed([f"{WORDS} {i}" for i in range(32)], info=None)
            vectors = [vectors[i % len(vectors)] for i in range(max(INGEST_BATCHES))]
            samples["index.Ingest"] = await measure(
                _ingest_runner(engine, vectors), INGEST_BATCHES, (0,), repeats
            )
    return samples


def profiles_from(samples: Mapping[str, list[Sample]]) -> dict[str, EngineProfile]:
    return {kind: profile_from(s, llm=kind == "llm") for kind, s in samples.items()}


async def ensure_profiles(
    app: Any, path: Path, embedder: Any | None = None, progress: Callable[[str], None] = log.info
) -> dict[str, EngineProfile]:
    """The stored profile at ``path`` or, when there is none (a first start), one measured now
    on ``app``'s started engines (the quick shapes) and stored there; given to ``app`` either
    way (:meth:`App.use_profiles`). Call it before the first query."""
    profiles = read_profiles(path)
    if profiles is not None and "index" in profiles and "index.Ingest" not in profiles:
        progress(f"the stored profile {path} predates the index's Ingest profile: measuring anew")
        profiles = None
    if profiles is None:
        t0 = time.perf_counter()
        progress(f"measuring engine profiles on this machine (first start, a few seconds): {path}")
        engines = {name: app.engines.instances(name)[0] for name in app.engines.kinds()}
        profiles = profiles_from(
            await measure_engines(engines, embedder, quick=True, progress=progress)
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        save_profiles(path, profiles)
        progress(f"measured {', '.join(profiles)} in {time.perf_counter() - t0:.1f} s; "
                 "`python -m ayo profile` re-measures with more shapes")  # fmt: skip
    app.use_profiles(profiles)
    return profiles


def read_profiles(path: Path) -> dict[str, EngineProfile] | None:
    """The profiles stored at ``path``, or None when there are none or the file is unreadable
    (logged)."""
    if not path.exists():
        return None
    try:
        profiles = load_profiles(path)
    except (OSError, ValueError) as exc:
        log.warning("ignoring the engine profile %s: %s", path, exc)
        return None
    log.info("engine profiles measured on this machine: %s (%s)", path, ", ".join(profiles))
    return profiles


def profile_path(data_dir: Path, model: str, dtype: str, threads: int) -> Path:
    """Where a profile of this machine, model, dtype and thread count is stored."""
    key = f"{cpu_model()}|{model}|{dtype}|{threads}|v{PROFILE_FORMAT}"
    slug = re.sub(r"[^a-z0-9]+", "-", f"{model}-{dtype}-{threads}t".lower()).strip("-")
    return data_dir / "profiles" / f"{slug}-{hashlib.sha1(key.encode()).hexdigest()[:8]}.json"


def engine_profile_path(data_dir: Path, model: str, llm: Any) -> Path:
    """:func:`profile_path` for a loaded ``LLMEngine``: its resolved dtype (or quantized
    weights format), its torch threads."""
    import torch

    threads = llm.config.num_threads or torch.get_num_threads()
    return profile_path(data_dir, model, llm.config.format_key, threads)


def stored_profiles(path: Path) -> dict[str, EngineProfile]:
    """The profiles stored at ``path``, or {} (the constants then apply) when there are none
    or the file is unreadable."""
    profiles = read_profiles(path)
    if profiles is None:
        log.info("no engine profile measured on this machine (%s): the plans use the constants",
                 path.name)  # fmt: skip
    return profiles or {}


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
    model: str,
    dtype: str,
    threads: int | None,
    data_dir: Path,
    collection: str = "wiki",
    weights: str = "auto",
) -> tuple[dict[str, EngineProfile], dict[str, list[Sample]], str]:
    """Load the server's engines (:func:`ayo.runtime.defaults.load_default_engines` over
    ``data_dir``), measure them with every shape, and fit their profiles. Returns the
    profiles, the samples and the LLM's resolved dtype (or quantized weights format)."""
    from ayo.runtime.defaults import EngineOptions, load_default_engines

    options = EngineOptions(model=model, dtype=dtype, weights=weights, llm_threads=threads,
                            data_dir=data_dir, collection=collection)  # fmt: skip
    engines = load_default_engines(options)
    by_name = engines.by_name()
    distinct = list({id(e): e for e in by_name.values()}.values())
    try:
        for engine in distinct:
            await engine.start()
        samples = await measure_engines(by_name, engines.embedder)
    finally:
        for engine in reversed(distinct):
            await engine.stop()
        engines.close()
    return profiles_from(samples), samples, engines.llm.config.format_key
