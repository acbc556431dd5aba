"""Engine profiles: what the passes (and later the critical-path policy) know about an engine."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LatencyModel:
    """Latency of one engine batch: ``fixed_ms + per_item_ms * items + per_token_ms * tokens``."""

    fixed_ms: float = 1.0
    per_item_ms: float = 0.5
    per_token_ms: float = 0.0

    def __post_init__(self) -> None:
        if min(self.fixed_ms, self.per_item_ms, self.per_token_ms) < 0:
            raise ValueError(f"latency coefficients must be >= 0, got {self}")

    def estimate_ms(self, items: int, tokens: int = 0) -> float:
        """Estimated milliseconds for a batch of ``items`` carrying ``tokens`` tokens in total."""
        return self.fixed_ms + self.per_item_ms * items + self.per_token_ms * tokens


@dataclass(frozen=True)
class EngineProfile:
    """Per-engine facts read by the passes.

    ``efficient_batch``: items per batch beyond which latency grows about linearly, so larger
    inputs are cut into micro-batches of this size (stage decomposition).
    ``prefill_split_min_tokens``: an early prompt part shorter than this is not worth a separate
    PartialPrefill. ``placeholder_tokens``: the token count assumed for a query input when
    estimating the early part at plan time.
    """

    efficient_batch: int = 16
    prefill_split_min_tokens: int = 16
    placeholder_tokens: int = 16
    latency: LatencyModel = field(default_factory=LatencyModel)

    def __post_init__(self) -> None:
        if self.efficient_batch < 1:
            raise ValueError(f"efficient_batch must be >= 1, got {self.efficient_batch}")
        if self.prefill_split_min_tokens < 0 or self.placeholder_tokens < 0:
            raise ValueError("prefill_split_min_tokens and placeholder_tokens must be >= 0")


DEFAULT_PROFILES: Mapping[str, EngineProfile] = {
    "llm": EngineProfile(efficient_batch=8, latency=LatencyModel(5.0, 2.0, 0.05)),
    "embedder": EngineProfile(efficient_batch=32, latency=LatencyModel(2.0, 0.4, 0.0)),
    "index": EngineProfile(efficient_batch=64, latency=LatencyModel(0.5, 0.05, 0.0)),
    # an op's own profile, where the engine's ops cost differently: adding vectors to a
    # query's collection is a copy, searching is a scan
    "index.Ingest": EngineProfile(efficient_batch=64, latency=LatencyModel(0.5, 0.02, 0.0)),
    "keyword": EngineProfile(efficient_batch=64, latency=LatencyModel(0.5, 0.1, 0.0)),
    "reranker": EngineProfile(efficient_batch=32, latency=LatencyModel(2.0, 0.5, 0.0)),
}


def profile_for(
    profiles: Mapping[str, EngineProfile], engine: str, engine_kind: str, op: str = ""
) -> EngineProfile:
    """The profile of op ``op`` (an ``Op`` value, e.g. ``"Ingest"``) on engine ``engine``: the
    op's own (``"index.Ingest"``, by engine name then kind) where there is one, else the
    engine's by its name, else by its kind; the defaults (``DEFAULT_PROFILES``) likewise."""
    keys = ([f"{engine}.{op}", f"{engine_kind}.{op}"] if op else []) + [engine, engine_kind]
    for key in keys:
        if key in profiles:
            return profiles[key]
    for key in keys[1::2]:  # by kind: the constants know no engine names
        if key in DEFAULT_PROFILES:
            return DEFAULT_PROFILES[key]
    return EngineProfile()
