"""Engine profiler: measure an engine's batch latency over batch sizes and token counts, fit the
:class:`LatencyModel` the passes and the critical-path policy read, and store profiles as JSON.

An engine is profiled through a callable ``run(items, tokens_per_item)`` that runs one batch of
that shape to completion (the caller builds real payloads for its engine).
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .profile import EngineProfile, LatencyModel

log = logging.getLogger(__name__)

RunBatch = Callable[[int, int], Awaitable[object]]


@dataclass(frozen=True)
class Sample:
    items: int
    tokens_per_item: int
    latency_ms: float


async def measure(
    run: RunBatch,
    batch_sizes: Iterable[int] = (1, 2, 4, 8, 16, 32),
    tokens_per_item: Iterable[int] = (0,),
    repeats: int = 3,
    clock: Callable[[], float] = time.perf_counter,
) -> list[Sample]:
    """Median latency of each (batch size, tokens per item) shape, after one warm-up run."""
    samples: list[Sample] = []
    for tokens in tokens_per_item:
        for items in batch_sizes:
            await run(items, tokens)
            times = []
            for _ in range(repeats):
                t0 = clock()
                await run(items, tokens)
                times.append((clock() - t0) * 1e3)
            samples.append(Sample(items, tokens, statistics.median(times)))
    return samples


def fit_latency(samples: list[Sample]) -> LatencyModel:
    """Least squares ``latency = fixed + per_item * items + per_token * items * tokens``,
    coefficients clipped at 0 (a negative cost is noise)."""
    if not samples:
        raise ValueError("no samples to fit")
    a = np.array([[1.0, s.items, s.items * s.tokens_per_item] for s in samples])
    y = np.array([s.latency_ms for s in samples])
    use_tokens = bool(a[:, 2].any())
    coef, *_ = np.linalg.lstsq(a if use_tokens else a[:, :2], y, rcond=None)
    fixed, per_item = max(0.0, float(coef[0])), max(0.0, float(coef[1]))
    per_token = max(0.0, float(coef[2])) if use_tokens else 0.0
    return LatencyModel(fixed_ms=fixed, per_item_ms=per_item, per_token_ms=per_token)


def efficient_batch(samples: list[Sample], tolerance: float = 0.15) -> int:
    """The smallest measured batch whose per-item latency is within ``tolerance`` of the best:
    past it, larger batches buy little throughput and only add latency."""
    shapes = [s for s in samples if s.tokens_per_item == samples[0].tokens_per_item]
    best = min(s.latency_ms / s.items for s in shapes)
    return min(s.items for s in shapes if s.latency_ms / s.items <= best * (1 + tolerance))


def profile_from(samples: list[Sample], *, llm: bool = False) -> EngineProfile:
    """An :class:`EngineProfile` from measurements. For an LLM, a prefill split pays once the
    early part's prefill time exceeds the extra step it costs: ``fixed / per_token`` tokens."""
    latency = fit_latency(samples)
    split = EngineProfile().prefill_split_min_tokens
    if llm and latency.per_token_ms > 0:
        split = math.ceil(round(latency.fixed_ms / latency.per_token_ms, 6))
    return EngineProfile(
        efficient_batch=efficient_batch(samples),
        prefill_split_min_tokens=split,
        latency=latency,
    )


async def profile_engine(run: RunBatch, *, llm: bool = False, **measure_options) -> EngineProfile:
    samples = await measure(run, **measure_options)
    profile = profile_from(samples, llm=llm)
    log.info("profiled engine: %s", profile)
    return profile


def save_profiles(path: str | Path, profiles: Mapping[str, EngineProfile]) -> None:
    data = {name: asdict(p) for name, p in profiles.items()}
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True))


def load_profiles(path: str | Path) -> dict[str, EngineProfile]:
    """Profiles saved by :func:`save_profiles`; a malformed file raises ValueError naming it."""
    try:
        data = json.loads(Path(path).read_text())
        return {
            name: EngineProfile(**{**p, "latency": LatencyModel(**p["latency"])})
            for name, p in data.items()
        }
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not an engine profile file ({e})") from e
