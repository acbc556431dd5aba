"""``python -m ayo profile``'s measurements on a tiny model: the shapes it samples, the fit,
where profiles are stored, and that measuring leaves the engine as it found it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ayo.engines.llm import LLMEngine
from ayo.runtime.profiling import PROFILE_HEADERS, measure_llm, profile_path, profile_rows
from ayo.scheduler.profiles.profile import DEFAULT_PROFILES
from ayo.scheduler.profiles.profiler import profile_from


async def test_measure_llm_samples_decode_steps_and_prefills(tiny_llama):
    eng = LLMEngine.from_model(tiny_llama.path, block_size=4, num_blocks=256, max_model_len=64)
    async with eng:
        samples = await measure_llm(eng, decode_batches=(1, 4), prefill_tokens=(8, 32), repeats=1)
        st = eng.stats()
    assert [(s.items, s.tokens_per_item) for s in samples] == [(1, 1), (4, 1), (1, 8), (1, 32)]
    assert all(s.latency_ms > 0 for s in samples)
    assert st.used_blocks == 0 and st.running == 0 and st.waiting == 0  # all closed
    profile = profile_from(samples, llm=True)
    lat = profile.latency
    assert min(lat.fixed_ms, lat.per_item_ms, lat.per_token_ms) >= 0
    rows = profile_rows({"llm": profile})
    assert len(rows) == 2 and rows[1][1] == "constant" and len(rows[0]) == len(PROFILE_HEADERS)
    assert rows[1][2] == f"{DEFAULT_PROFILES['llm'].latency.fixed_ms:.2f}"


def test_profiles_are_keyed_by_model_dtype_and_threads(tmp_path: Path):
    a = profile_path(tmp_path, "smollm2-135m-instruct", "float32", 2)
    assert a == profile_path(tmp_path, "smollm2-135m-instruct", "float32", 2)
    assert a.parent == tmp_path / "profiles" and a.name.startswith("smollm2-135m-instruct-float32")
    others = {
        profile_path(tmp_path, "smollm2-135m-instruct", "bfloat16", 2),
        profile_path(tmp_path, "smollm2-135m-instruct", "float32", 1),
        profile_path(tmp_path, "other", "float32", 2),
    }
    assert a not in others and len(others) == 3
    import ayo.runtime.profiling as profiling

    older = profiling.PROFILE_FORMAT - 1  # what an older version measured is measured anew
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(profiling, "PROFILE_FORMAT", older)
        assert profile_path(tmp_path, "smollm2-135m-instruct", "float32", 2) != a


def test_stored_profiles_missing_saved_and_malformed(tmp_path: Path):
    from ayo.runtime.profiling import stored_profiles
    from ayo.scheduler.profiles.profile import EngineProfile, LatencyModel
    from ayo.scheduler.profiles.profiler import save_profiles

    key = (tmp_path, "smollm2-135m-instruct", "float32", 2)
    assert stored_profiles(profile_path(*key)) == {}  # none measured: the constants apply
    measured = {"llm": EngineProfile(8, 88, 16, LatencyModel(44.6, 4.0, 0.51))}
    path = profile_path(*key)
    path.parent.mkdir(parents=True)
    save_profiles(path, measured)
    assert stored_profiles(path) == measured
    path.write_text("{not json")
    assert stored_profiles(path) == {}  # unreadable: ignored with a warning, not a failed start


async def test_a_first_start_measures_every_engine_and_a_later_one_loads(tiny_llama, tmp_path):
    """``ensure_profiles`` on an App of the tiny LLM and the fake retrieval engines: the first
    call measures each kind (progress reported), stores the file and gives the App the
    profiles its plans and critical-path costs then read; the next call only loads it."""
    from ayo.runtime import profiling
    from ayo.runtime.app import App
    from ayo.scheduler.sim.fakes import fake_engines

    eng = LLMEngine.from_model(tiny_llama.path, block_size=4, num_blocks=256, max_model_len=64)
    app = App()
    engines = {**fake_engines(), "llm": eng}
    engines.pop("judge", None)
    for name, engine in engines.items():
        app.add_engine(name, engine)
    path = tmp_path / "profiles" / "p.json"
    said: list[str] = []
    shapes = {"decode_batches": (1, 2), "prefill_tokens": (8, 32), "repeats": 1}
    async with app:
        original = dict(profiling.QUICK)
        profiling.QUICK.update(shapes)  # the tiny model's context is 64 tokens
        try:
            first = await profiling.ensure_profiles(app, path, engines["embedder"], said.append)
        finally:
            profiling.QUICK.clear()
            profiling.QUICK.update(original)
        assert set(first) == {"llm", "embedder", "index", "index.Ingest", "keyword", "reranker"}
        assert path.exists() and app.profiles == first
        assert sum(s.startswith("profiling engine ") for s in said) == 5
        plan = App.fake().plan("naive_rag", {"question": "why?"})  # the tiny model has no tokenizer
        costs = app._plan_costs(plan)  # what the critical-path policy reads
        decode = next(n for n in costs.facts.values() if n.op == "Decode")
        expected = decode.node.config.params.max_tokens * first["llm"].latency.estimate_ms(1)
        assert costs.cost_ms[decode.node_id] == pytest.approx(expected)
        said.clear()
        again = await profiling.ensure_profiles(app, path, engines["embedder"], said.append)
    assert again == first and said == []  # loaded, nothing measured
