"""The engine profiler on an engine whose latency is known exactly (a virtual clock)."""

import pytest

from ayo.scheduler.profiles.profile import EngineProfile, LatencyModel
from ayo.scheduler.profiles.profiler import (
    efficient_batch,
    fit_latency,
    load_profiles,
    measure,
    profile_engine,
    save_profiles,
)


class VirtualEngine:
    """Latency 4 ms + 0.5 ms per item + 0.02 ms per token, but batches below 8 items cost as
    much as 8 (a device that is under-used by small batches)."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def run(self, items: int, tokens: int) -> None:
        self.now += (4.0 + 0.5 * max(items, 8) + 0.02 * items * tokens) / 1e3


async def test_fit_recovers_a_linear_latency_model():
    engine = VirtualEngine()
    samples = await measure(
        engine.run, (8, 16, 32), tokens_per_item=(0, 100), repeats=1, clock=engine.clock
    )
    model = fit_latency(samples)
    assert model.fixed_ms == pytest.approx(4.0, abs=1e-6)
    assert model.per_item_ms == pytest.approx(0.5, abs=1e-6)
    assert model.per_token_ms == pytest.approx(0.02, abs=1e-6)


async def test_efficient_batch_is_where_per_item_cost_flattens():
    engine = VirtualEngine()
    samples = await measure(engine.run, (1, 2, 4, 8, 16, 32, 64), repeats=1, clock=engine.clock)
    # per item: 8 ms at 1, 1 ms at 8, 0.75 at 16, 0.625 at 32, 0.5625 at 64 (best).
    assert efficient_batch(samples, tolerance=0.15) == 32


async def test_profiles_round_trip_through_json(tmp_path):
    engine = VirtualEngine()
    profile = await profile_engine(
        engine.run, llm=True, batch_sizes=(8, 16), tokens_per_item=(0, 50), clock=engine.clock
    )
    assert isinstance(profile, EngineProfile)
    assert profile.prefill_split_min_tokens == 200  # 4 ms fixed / 0.02 ms per token
    path = tmp_path / "profiles.json"
    save_profiles(path, {"llm": profile, "embedder": EngineProfile(latency=LatencyModel(1, 2))})
    loaded = load_profiles(path)
    assert loaded["llm"] == profile
    assert loaded["embedder"].latency.per_item_ms == 2
    path.write_text('{"llm": {"nope": 1}}')
    with pytest.raises(ValueError, match="not an engine profile"):
        load_profiles(path)
