"""The App API, its configuration errors, metrics, traces and the ``run`` command."""

import asyncio
import json
import sys

import pytest

from ayo.cli.main import main
from ayo.runtime.app import App
from ayo.runtime.engine_set import SchedulerConfig
from ayo.scheduler import PlanError
from ayo.scheduler.batching.engine_scheduler import QueueFull
from ayo.scheduler.ir.engine_api import engine_kind
from ayo.scheduler.sim.fakes import FakeEmbedder, FakeIndex, FakeLLM, PieceStream, fake_engines


async def test_run_returns_outputs_latency_and_a_trace_with_every_primitive() -> None:
    async with App.fake() as app:
        result = await app.run("search_gen", {"question": "bread and glass"})
        plan = app.plan("search_gen", {"question": "x"})
    assert set(result.outputs) >= {"answer", "searched"} and result.latency_ms > 0
    traced = {s.node_id for s in result.trace.spans}
    ran = {n.id for n in plan.nodes if n.id not in ("input", "output")}
    if not result.outputs["searched"]:  # the skipped branch's keyword search never ran
        ran.discard("search.search")
    assert traced == ran
    engines = set(result.trace.engines())
    assert {"judge", "llm", "control"} <= engines
    chrome = result.trace.to_chrome()
    assert {e["args"]["name"] for e in chrome["traceEvents"] if e["ph"] == "M"} == engines


async def test_two_instances_of_one_engine_share_the_load() -> None:
    a, b = FakeEmbedder(delay_s=0.002), FakeEmbedder(delay_s=0.002)
    llm1, llm2 = FakeLLM(delay_s=0.001), FakeLLM(delay_s=0.001)
    llm2.tokenizer = llm1.tokenizer  # two instances of one model
    app = App()
    for name, engine in fake_engines().items():
        pools = {"embedder": [a, b], "llm": [llm1, llm2]}
        app.add_engine(name, pools.get(name, engine))
    async with app:
        outs = await asyncio.gather(
            *(app.run("naive_rag", {"question": f"q{i}"}) for i in range(24))
        )
    assert a.calls > 0 and b.calls > 0
    assert llm1.prefill_calls and llm2.prefill_calls  # sequences spread over both LLMs
    assert llm1.open_sequences == llm2.open_sequences == 0
    async with App.fake() as single:
        ref = await asyncio.gather(
            *(single.run("naive_rag", {"question": f"q{i}"}) for i in range(24))
        )
    assert [o.outputs for o in outs] == [r.outputs for r in ref]


def test_configuration_errors_say_what_to_do() -> None:
    with pytest.raises(ValueError, match="unknown batching policy 'lifo'; choose one of"):
        SchedulerConfig("lifo")
    app = App()
    app.add_engine("embedder", FakeEmbedder())
    with pytest.raises(ValueError, match="already registered"):
        app.add_engine("embedder", FakeEmbedder())
    with pytest.raises(ValueError, match="cannot be pooled"):
        app.add_engine("index", [FakeIndex(), FakeIndex()])
    with pytest.raises(TypeError, match="is not an engine: it must declare kind"):
        engine_kind(object())
    with pytest.raises(TypeError, match="is not an engine"):
        app.add_engine("llm", object())
    with pytest.raises(KeyError, match="unknown workflow 'nope'"):
        asyncio.run(app.run("nope", {"question": "x"}))


async def test_a_primitive_with_no_engine_is_named() -> None:
    app = App()
    app.add_engine("embedder", FakeEmbedder())
    async with app:
        with pytest.raises(KeyError, match=r"needs engines \['index', 'llm'\]"):
            await app.run("naive_rag", {"question": "x"})


async def test_metrics_count_queries_batches_and_queue_depth() -> None:
    async with App.fake() as app:
        await asyncio.gather(*(app.run("naive_rag", {"question": f"q{i}"}) for i in range(6)))
        with pytest.raises(PlanError, match="has no inputs"):
            await app.run("naive_rag", {"question": "x", "unknown": "y"})
        text = app.metrics.exposition().decode()
    assert 'ayo_queries_total{app="naive_rag"} 6.0' in text
    assert 'ayo_batch_size_count{engine="embedder"}' in text
    assert 'ayo_primitive_latency_seconds_count{engine="index",op="Search"}' in text
    assert 'ayo_engine_queue_depth{engine="llm"} 0.0' in text


def test_default_app_names_what_is_missing(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ayo.engines.llm", None)  # as if the package were absent
    with pytest.raises(RuntimeError, match=r"the embedded engines need their packages"):
        App.default()


def test_cli_run_json_and_trace(tmp_path, capsys) -> None:
    trace = tmp_path / "trace.json"
    args = ["run", "advanced_rag", "--engines", "fake", "-i", "question=why do stars shine"]
    args += ["-i", "documents=rivers run to the sea", "-i", "documents=stars burn"]
    assert main([*args, "--json", "--trace", str(trace)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"outputs", "latency_ms"} and out["outputs"]["answer"]
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name") == "rerank.rerank" for e in events)

    async def direct():
        async with App.fake() as app:
            inputs = {"question": "why do stars shine"}
            inputs["documents"] = ["rivers run to the sea", "stars burn"]
            return (await app.run("advanced_rag", inputs)).outputs

    assert out["outputs"] == asyncio.run(direct())
    assert main(["run", "naive_rag", "--engines", "fake", "-i", "oops"]) == 2
    assert "--input takes key=value" in capsys.readouterr().err


async def test_llm_max_running_bounds_concurrent_decodes() -> None:
    class CountingLLM(FakeLLM):
        running = peak = 0

        def decode(self, seq, params, *, info=None):
            return PieceStream(self._counted(super().decode(seq, params)), params)

        async def _counted(self, stream):
            CountingLLM.running += 1
            CountingLLM.peak = max(CountingLLM.peak, CountingLLM.running)
            try:
                async for piece in stream:
                    yield piece
            finally:
                CountingLLM.running -= 1

    app = App()
    for name, engine in fake_engines().items():
        if name == "llm":
            engine = CountingLLM(delay_s=0.001)
            app.add_engine(name, engine, config=SchedulerConfig("depth", max_running=2))
        else:
            app.add_engine(name, engine)
    async with app:
        outs = await asyncio.gather(
            *(app.run("naive_rag", {"question": f"q{i}"}) for i in range(8))
        )
    async with App.fake() as ref:
        want = await asyncio.gather(
            *(ref.run("naive_rag", {"question": f"q{i}"}) for i in range(8))
        )
    assert CountingLLM.peak == 2 and CountingLLM.running == 0
    assert [o.outputs for o in outs] == [w.outputs for w in want]


async def test_a_completion_is_a_query_with_a_trace_and_shares_the_admission() -> None:
    """``App.complete`` (the OpenAI endpoints' door) runs the ``@completion`` workflow as any
    query: its Generate primitive is traced on the LLM (its prefill and its decode), it is
    counted in the metrics, and it holds one of the same ``max_queries`` slots as app queries."""
    from ayo.scheduler import SamplingParams

    async with App.fake(delay_s=0.02, max_queries=1) as app:
        llm = app.engines.instances("llm")[0]
        ids = llm.tokenizer.encode("why do stars shine")
        params = SamplingParams(max_tokens=4)
        result = await app.run("@completion", {"prompt": ids, "params": params})
        end = result.outputs["completion"]
        assert end.text == FakeLLM().answer("why do stars shine")[:20]
        assert end.finish_reason == "length" and len(end.token_ids) == 4
        rows = [(s.node_id, s.engine) for s in result.trace.spans]
        assert rows == [("completion.generate", "llm")] * 2  # its prefill, then its decode
        assert "@completion" not in app.workflows  # internal: not an app
        pieces: list = []
        assert (await app.complete(ids, params, on_piece=pieces.append)).text == end.text
        assert "".join(p.text for p in pieces) == end.text
        query = asyncio.ensure_future(app.run("naive_rag", {"question": "bread"}))
        await asyncio.sleep(0.005)
        with pytest.raises(QueueFull, match="1 queries are in flight"):
            await app.complete(ids, params, wait=False)  # the app query holds the one slot
        await query
        metrics = app.metrics.exposition().decode()
    assert 'ayo_queries_total{app="@completion"} 2.0' in metrics
    assert 'op="Generate"' in metrics


async def test_an_app_variant_and_a_query_of_named_passes() -> None:
    """``with_options`` builds an app with its answers capped (the benchmarks' workloads): the
    variant's plans are its own in the plan cache; ``optimize`` may name the passes to run."""
    from ayo.apps import APPS
    from ayo.runtime.plan_cache import PlanCache
    from ayo.scheduler import Op

    short = APPS["naive_rag"].with_options(answer_tokens=3)
    assert short.name == "naive_rag" and short != APPS["naive_rag"]
    inputs = {"question": "What is Ayo?"}
    cache = PlanCache()
    caps = {
        target.options: next(
            n.config.params.max_tokens
            for n in cache.for_inputs(target, inputs).nodes
            if n.op == Op.DECODE
        )
        for target in (APPS["naive_rag"], short)
    }
    assert caps == {(): 96, (("answer_tokens", 3),): 3} and cache.stats.entries == 2
    async with App.fake() as app:
        app.add_workflow(short)
        whole = await app.run("naive_rag", inputs)
        pruned = await app.run("naive_rag", inputs, optimize=["prune"])
        assert pruned.outputs == whole.outputs
        assert {s.node_id for s in pruned.trace.spans} >= {"synthesis.decode"}
        with pytest.raises(ValueError, match="unknown passes \\['fast'\\]"):
            await app.run("naive_rag", inputs, optimize={"fast"})
    with pytest.raises(TypeError, match="answer_token"):
        APPS["naive_rag"].with_options(answer_token=3)
    with pytest.raises(ValueError, match="answer_tokens must be >= 1, got 0"):
        APPS["advanced_rag"].with_options(answer_tokens=0)


def test_engine_names_on_one_instance_share_a_resource_in_the_plans() -> None:
    """The judge registered as the LLM itself computes on the LLM: the planner is told so
    (the prefill split counts the judge's work as the LLM's)."""
    llm = FakeLLM()
    app = App()
    app.add_engine("llm", llm)
    app.add_engine("judge", llm)
    app.add_engine("other", [FakeLLM(), FakeLLM()])
    assert app.engines.resources() == {"llm": "llm", "judge": "llm", "other": "other"}
    assert app.plans.resources == app.engines.resources()
