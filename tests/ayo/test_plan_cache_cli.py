"""Plan cache, pictures and the ``python -m ayo plan`` command."""

import json
import shutil

import pytest

from ayo.apps import APPS
from ayo.cli.main import main
from ayo.runtime.plan_cache import PlanCache
from ayo.scheduler import EngineProfile, plan_to_json
from ayo.workflow import InputShape

NO_DOT = shutil.which("dot") is None


def test_cache_hits_within_a_size_bucket_and_misses_across() -> None:
    cache = PlanCache()
    app = APPS["naive_rag"]
    a = cache.get(app, InputShape.from_sizes(question=1, documents=9))
    b = cache.get(app, InputShape.from_sizes(question=1, documents=16))  # same bucket (16)
    assert a is b
    c = cache.get(app, InputShape.from_sizes(question=1, documents=17))  # bucket 32
    d = cache.get(app, InputShape.from_sizes(question=1))  # no documents: another workflow
    e = cache.get(app, InputShape.from_sizes(question=1), optimize=False)
    assert len({id(a), id(c), id(d), id(e)}) == 4
    assert "indexing.chunk" not in d.node_map and "indexing.chunk" in a.node_map
    stats = cache.stats
    assert (stats.hits, stats.misses, stats.entries) == (1, 4, 4)
    assert stats.hit_rate == pytest.approx(0.2)


def test_cache_keys_on_workflow_and_config() -> None:
    shape = InputShape.from_sizes(question=1, documents=128)
    wf = APPS["advanced_rag"].workflow(shape)
    small = PlanCache(profiles={"embedder": EngineProfile(efficient_batch=4)})
    large = PlanCache(profiles={"embedder": EngineProfile(efficient_batch=1024)})
    assert small.get(wf, shape).node("indexing.embed").config.micro_batch >= 4
    assert large.get(wf, shape).node("indexing.embed").config.micro_batch == 0
    assert small.get(APPS["advanced_rag"].workflow(shape), shape) is small.get(
        wf, shape
    )  # equal workflows
    assert small.stats.hits == 2


def test_cache_evicts_least_recently_used() -> None:
    cache = PlanCache(max_entries=2)
    shapes = [InputShape.from_sizes(question=1, documents=n) for n in (2, 4, 8)]
    first = cache.get(APPS["naive_rag"], shapes[0])
    cache.get(APPS["naive_rag"], shapes[1])
    cache.get(APPS["naive_rag"], shapes[2])
    assert cache.stats.entries == 2
    assert cache.get(APPS["naive_rag"], shapes[0]) is not first  # recompiled
    with pytest.raises(ValueError, match="max_entries"):
        PlanCache(max_entries=0)


def test_for_inputs_agrees_with_get_and_keeps_the_lru_honest() -> None:
    cache, ref = PlanCache(max_entries=2), PlanCache(max_entries=2)
    app = APPS["naive_rag"]
    docs = [f"doc {i}" for i in range(9)]
    cases = [
        {"question": "q", "documents": docs},
        {"question": "other", "documents": docs[:5] + ["x"] * 11},  # 16: the same bucket
        {"question": "q"},
        {"question": "q", "documents": None},  # None is absent: as above
        {"question": "q", "documents": docs},
    ]
    plans = [cache.for_inputs(app, inputs) for inputs in cases]
    assert plans[0] is plans[1] and plans[2] is plans[3]
    assert plans[4] is plans[0]  # still cached (2 entries, least recently used dropped)
    for inputs, plan in zip(cases, plans):
        assert plan_to_json(plan) == plan_to_json(ref.get(app, InputShape.of(inputs)))
    assert (cache.stats.hits, cache.stats.misses) == (3, 2)
    cache.for_inputs(app, {"question": "q", "documents": docs * 4})  # bucket 64: evicts one
    cache.for_inputs(app, {"question": "q"})  # evicted before: compiled again
    assert cache.stats.misses == 4 and cache.stats.entries == 2
    cache.clear()
    assert cache.for_inputs(app, cases[0]) is not plans[0]


def test_cli_json_matches_the_documented_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "advanced_rag"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"nodes", "edges"}
    assert all(set(n) == {"id", "op", "engine", "module"} for n in data["nodes"])
    assert all(set(e) == {"src", "src_port", "dst", "dst_port", "kind"} for e in data["edges"])
    ops = {n["op"] for n in data["nodes"]}
    assert {"PartialDecode", "Aggregate"} <= ops
    # a prompt's early part is split off where indexing the query's documents keeps the LLM idle
    assert main(["plan", "naive_rag", "--documents", "128"]) == 0
    ops = {n["op"] for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert {"PartialPrefill", "FullPrefill"} <= ops
    assert main(["plan", "advanced_rag", "--no-optimize"]) == 0
    base = json.loads(capsys.readouterr().out)
    assert {n["op"] for n in base["nodes"]}.isdisjoint({"PartialDecode", "PartialPrefill"})
    assert {e["kind"] for e in base["edges"]} == {"value"}


def test_cli_dot_and_errors(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    out = tmp_path / "plan.dot"
    assert main(["plan", "search_gen", "--format", "dot", "--output", str(out)]) == 0
    text = out.read_text()
    assert (
        text.startswith('digraph "search_gen"') and '"judge.prefill"' in text and "@judge" in text
    )
    assert main(["plan", "search_gen", "--documents", "3"]) == 2
    assert "takes no documents" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["plan", "no_such_app"])


@pytest.mark.skipif(NO_DOT, reason="graphviz dot binary not installed")
def test_cli_svg(tmp_path) -> None:
    out = tmp_path / "plan.svg"
    assert main(["plan", "advanced_rag", "--format", "svg", "-o", str(out)]) == 0
    svg = out.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "expansion.decode" in svg


def test_svg_without_dot_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["plan", "naive_rag", "--format", "svg"]) == 2
    assert "apt-get install graphviz" in capsys.readouterr().err
