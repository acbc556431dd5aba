"""The runtime end to end on deterministic engines: many queries at once through the engine
schedulers (cross-query batching on), equal to the reference executor; the paper's two-query
batching example; failure isolation; deadlines and cancellation releasing engine state."""

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings

from ayo.apps import APPS
from ayo.passes import CompileContext, compile_workflow
from ayo.runtime.app import App
from ayo.runtime.engine_set import SchedulerConfig
from ayo.scheduler import Edge, EngineProfile, ExecutionError, LatencyModel, Plan, Port, PortType
from ayo.scheduler.batching.policies import BatchLimits
from ayo.scheduler.ir import primitives as P
from ayo.scheduler.runtime.graph_run import DeadlineExceeded, GraphRun
from ayo.scheduler.sim.fakes import FakeEmbedder, FakeLLM, fake_engines
from ayo.scheduler.sim.simulation import SimKeywordIndex, run_virtual
from ayo.workflow import InputShape
from tests.ayo.test_equivalence import random_workflows

DOCS = [" ".join(f"w{i}x{j} rivers stars" for j in range(30 + 9 * i)) for i in range(7)]
QUESTIONS = ["what about rivers?", "why do stars shine", "bread and glass", "music of trains"]
PROFILES = {"llm": EngineProfile(efficient_batch=4), "embedder": EngineProfile(efficient_batch=8)}


def _cases():
    for name, template in sorted(APPS.items()):
        for i, q in enumerate(QUESTIONS):
            docs = "documents" in template.required or ("documents" in template.optional and i % 2)
            yield name, {"question": q, **({"documents": DOCS[: 3 + i]} if docs else {})}


async def test_every_app_optimized_equals_unoptimized_under_cross_query_batching() -> None:
    cases = list(_cases())
    async with App.fake(profiles=PROFILES) as app:
        runs = [app.run(n, inp, optimize=opt) for n, inp in cases for opt in (False, True)]
        results = await asyncio.wait_for(asyncio.gather(*runs), timeout=30)
        stats = app.engines.stats()
        engines = {n: app.engines.instances(n)[0] for n in app.engines.kinds()}
    for k, (name, inputs) in enumerate(cases):
        base, opt = results[2 * k].outputs, results[2 * k + 1].outputs
        assert base == opt and base["answer"], (name, inputs["question"])
        shape = InputShape.of(inputs)
        plan = compile_workflow(
            APPS[name].workflow(shape), CompileContext(PROFILES, shape=shape), optimize=True
        )
        assert await GraphRun(plan, inputs, fake_engines()).run() == opt  # the reference
    # Batching really happened across queries (the LLM batches its own steps), and nothing leaked.
    assert stats["embedder"]["mean_batch_items"] > 2
    assert engines["llm"].open_sequences == 0 and engines["judge"].open_sequences == 0
    assert set(engines["index"].collections) == {"default"}


def _plan(name: str, nodes, edges) -> Plan:
    from ayo.scheduler import validate

    return validate(Plan(name, tuple(nodes), tuple(edges)))


T, TL, DL = PortType.TEXT, PortType.TEXT_LIST, PortType.DOC_LIST


def paper_plans() -> tuple[Plan, Plan, Plan]:
    """Query 1: A (keyword search, then rerank and format: depth 3) and B (keyword search into
    E, depth 2; E also waits for D on the slow engine). Query 2: G (depth 1). A blocker plan
    keeps the keyword engine busy while all three get queued."""
    inp, l1 = P.input_node([Port("q", T)]), P.map_node("l", "to_list")
    q1 = _plan(
        "query1",
        [
            inp, l1,
            P.keyword_search("A", "kw", 2), P.rerank("rA", "reranker", 1),
            P.map_node("fA", "format_docs"),
            P.keyword_search("B", "kw", 2), P.keyword_search("D", "slow", 2),
            P.aggregate("E", "merge", DL),
            P.output_node([Port("a", T), Port("b", DL)]),
        ],
        [
            Edge("input", "q", "l", "text"), Edge("l", "value", "A", "queries"),
            Edge("l", "value", "B", "queries"), Edge("l", "value", "D", "queries"),
            Edge("input", "q", "rA", "query"), Edge("A", "docs", "rA", "docs"),
            Edge("rA", "docs", "fA", "docs"), Edge("fA", "value", "output", "a"),
            Edge("B", "docs", "E", "a"), Edge("D", "docs", "E", "b"),
            Edge("E", "value", "output", "b"),
        ],
    )  # fmt: skip
    q2 = _plan(
        "query2",
        [inp, l1, P.keyword_search("G", "kw", 2), P.output_node([Port("g", DL)])],
        [
            Edge("input", "q", "l", "text"), Edge("l", "value", "G", "queries"),
            Edge("G", "docs", "output", "g"),
        ],
    )  # fmt: skip
    blocker = _plan(
        "blocker",
        [inp, l1, P.keyword_search("K", "kw", 2), P.output_node([Port("k", DL)])],
        [
            Edge("input", "q", "l", "text"), Edge("l", "value", "K", "queries"),
            Edge("K", "docs", "output", "k"),
        ],
    )  # fmt: skip
    assert q1.depth["A"] == 3 and q1.depth["B"] == 2 and q2.depth["G"] == 1
    return q1, q2, blocker


def _paper_batches(policy: str) -> dict[str, float]:
    """Start times (virtual ms) of A, B and G on the keyword engine under ``policy``."""

    async def main() -> dict[str, float]:
        from ayo.scheduler.sim.fakes import FakeReranker, sample_corpus

        app = App(builtin_apps=False)
        corpus = sample_corpus(12)
        app.add_engine(
            "kw",
            SimKeywordIndex(LatencyModel(10.0, 0.0), corpus),
            config=SchedulerConfig(policy, BatchLimits(max_items=2)),
        )
        app.add_engine("slow", SimKeywordIndex(LatencyModel(100.0, 0.0), corpus))
        app.add_engine("reranker", FakeReranker())
        for plan in paper_plans():
            app.add_workflow(_PlanWorkflow(plan))
        async with app:
            first = asyncio.create_task(app.run("blocker", {"q": "stars"}))
            await asyncio.sleep(0.001)  # the blocker's K is running (10 ms)
            r1 = asyncio.create_task(app.run("query1", {"q": "rivers"}))
            await asyncio.sleep(0)
            r2 = asyncio.create_task(app.run("query2", {"q": "bread"}))
            res = await asyncio.gather(first, r1, r2)
        starts = {s.node_id: s.start * 1e3 for r in res for s in r.trace.spans if s.engine == "kw"}
        return {k: round(v - starts["K"], 6) for k, v in starts.items()}

    return run_virtual(main())


class _PlanWorkflow:
    """A fixed plan registered as a workflow (test helper: the plan cache compiles it as is)."""

    def __init__(self, plan: Plan) -> None:
        self.name = plan.name
        self.plan = plan


@pytest.fixture(autouse=True)
def _fixed_plans(monkeypatch):
    from ayo.runtime.plan_cache import PlanCache

    original = PlanCache.get

    def get(self, target, shape, optimize=True):
        if isinstance(target, _PlanWorkflow):
            return target.plan
        return original(self, target, shape, optimize)

    monkeypatch.setattr(PlanCache, "get", get)


def test_paper_example_depth_batches_a_with_g_through_the_runtime() -> None:
    depth = _paper_batches("depth")
    assert depth["A"] == depth["G"] == 10.0 and depth["B"] == 20.0  # A+G first, then B
    fcfs = _paper_batches("fcfs")
    assert fcfs["A"] == fcfs["B"] == 10.0 and fcfs["G"] == 20.0  # A+B first: query 2 waits


class PoisonEmbedder(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__(delay_s=0.001)
        self.batches: list[list[str]] = []

    async def embed(self, texts, *, info=None):
        self.batches.append(list(texts))
        if any("poison" in t for t in texts):
            raise ValueError("embedder cannot read poison")
        return await super().embed(texts)


async def test_failure_is_isolated_to_the_query_that_caused_it() -> None:
    app = App()
    engines = {**fake_engines(), "embedder": PoisonEmbedder()}
    for name, engine in engines.items():
        app.add_engine(name, engine)
    questions = ["rivers", "stars", "poison pill", "bread", "glass"]
    async with app:
        runs = [app.run("naive_rag", {"question": q}) for q in questions]
        results = await asyncio.gather(*runs, return_exceptions=True)
        later = await app.run("naive_rag", {"question": "trains"})
    failed = results[2]
    assert isinstance(failed, ExecutionError) and failed.node == "retrieval.embed"
    assert "ValueError: embedder cannot read poison" in str(failed)
    assert all(not isinstance(r, BaseException) for i, r in enumerate(results) if i != 2)
    assert later.outputs["answer"]
    merged = [b for b in engines["embedder"].batches if "poison pill" in b and len(b) > 1]
    assert merged, "the poisoned request shared a batch with others"
    assert engines["llm"].open_sequences == 0


class SlowLLM(FakeLLM):
    """A fake LLM taking 50 ms (virtual) per prefill and per decoded piece."""

    def __init__(self) -> None:
        super().__init__(delay_s=0.05)


# The planner's view of these tests' engines: retrieval slow enough that the LLM has idle time
# for the early part of a prompt (the prefill split applies)
SLOW_RETRIEVAL = {"embedder": EngineProfile(latency=LatencyModel(50.0, 1.0))}


def _slow_app() -> tuple[App, dict]:
    engines = {**fake_engines(), "llm": SlowLLM()}
    app = App(profiles=SLOW_RETRIEVAL)
    for name, engine in engines.items():
        app.add_engine(name, engine)
    return app, engines


INPUTS = {"question": "why do stars shine", "documents": DOCS[:3]}


def test_deadline_fails_the_query_and_releases_engine_state() -> None:
    async def main():
        app, engines = _slow_app()
        async with app:
            seen = []  # open sequences and collections just before the deadline
            asyncio.get_running_loop().call_later(
                0.299,
                lambda: seen.append(
                    (engines["llm"].open_sequences, len(engines["index"].collections))
                ),
            )
            with pytest.raises(DeadlineExceeded, match=r"missed its deadline \(300.0 ms\)") as info:
                await app.run("advanced_rag", INPUTS, deadline=0.3)
            # the expansion's sequence and the answer's early prefill (the prefill split)
            assert seen[0][0] >= 2 and seen[0][1] == 2
            after = app.engines.queue_depths()
            ok = await app.run("advanced_rag", INPUTS)  # the app keeps serving
        return info.value, after, ok, engines

    err, depths, ok, engines = run_virtual(main())
    assert "expansion.decode" in err.running and "expansion.decode" in str(err)
    assert engines["llm"].open_sequences == 0  # expansion + early answer prefill closed
    assert set(engines["index"].collections) == {"default"}  # the per-query collection dropped
    assert all(d == 0 for d in depths.values()) and ok.outputs["answer"]


def test_cancelling_a_query_cancels_its_primitives_and_releases_state() -> None:
    async def main():
        app, engines = _slow_app()
        async with app:
            task = asyncio.create_task(app.run("advanced_rag", INPUTS))
            await asyncio.sleep(0.2)  # expansion decoding, indexing done
            assert engines["llm"].open_sequences > 0 and len(engines["index"].collections) == 2
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return engines, app.engines.queue_depths()

    engines, depths = run_virtual(main())
    assert engines["llm"].open_sequences == 0
    assert set(engines["index"].collections) == {"default"}
    assert all(d == 0 for d in depths.values())


class FailingOpenLLM(FakeLLM):
    """Opening a sequence fails after 10 ms (virtual)."""

    async def open(self) -> int:
        await asyncio.sleep(0.01)
        raise RuntimeError("no KV room")


def _app_with(**engines: object) -> tuple[App, dict]:
    engines = {**fake_engines(), **engines}
    app = App(profiles=SLOW_RETRIEVAL)
    for name, engine in engines.items():
        app.add_engine(name, engine)
    return app, engines


def test_an_error_elsewhere_interrupts_the_primitive_running_in_the_callers_task() -> None:
    # naive_rag runs its embed in the caller's task (the first primitive made ready); the
    # partial prefill fails meanwhile: the query fails then, not when the 10 s embed ends, and
    # the embed request is withdrawn.
    async def main():
        app, _ = _app_with(embedder=FakeEmbedder(delay_s=10.0), llm=FailingOpenLLM())
        async with app:
            loop = asyncio.get_running_loop()
            began = loop.time()
            with pytest.raises(ExecutionError, match="no KV room") as info:
                await app.run("naive_rag", {"question": "why"})
            took = loop.time() - began
            depths = app.engines.queue_depths()
        return info.value, took, depths

    err, took, depths = run_virtual(main())
    assert err.node == "synthesis.prefill.partial" and took < 1.0
    assert all(d == 0 for d in depths.values())


def test_the_deadline_interrupts_the_primitive_running_in_the_callers_task() -> None:
    async def main():
        app, engines = _app_with(embedder=FakeEmbedder(delay_s=10.0))
        async with app:
            loop = asyncio.get_running_loop()
            began = loop.time()
            with pytest.raises(DeadlineExceeded) as info:
                await app.run("naive_rag", {"question": "why"}, deadline=0.1)
            took = loop.time() - began
            depths = app.engines.queue_depths()
            still_open = engines["llm"].open_sequences
        return info.value, took, depths, still_open

    err, took, depths, still_open = run_virtual(main())
    assert err.running == ["retrieval.embed"] and took == pytest.approx(0.1, abs=0.01)
    assert all(d == 0 for d in depths.values()) and still_open == 0


class SlowOpenLLM(FakeLLM):
    """Opening a sequence suspends (as a real engine's worker hand-off does)."""

    async def open(self) -> int:
        await asyncio.sleep(0.001)
        return await super().open()


async def test_a_primitive_started_eagerly_that_suspends_keeps_its_own_request_info() -> None:
    # The partial prefill starts eagerly inside run() and suspends in open(): it goes on in a
    # task whose context names it, while the embed runs in the caller's task under its own.
    app, _ = _app_with(llm=SlowOpenLLM())
    inputs = {"question": "why do stars shine"}
    async with app:
        result = await app.run("naive_rag", inputs)
        reference = await app.run("naive_rag", inputs, optimize=False)
    rows = {(s.node_id, s.engine, s.query_id) for s in result.trace.spans}
    q = result.query_id
    assert ("synthesis.prefill.partial", "llm", q) in rows
    assert ("retrieval.embed", "embedder", q) in rows and ("retrieval.search", "index", q) in rows
    # seven primitives of the plan, and the map that lists the answer's sources
    assert len(result.trace.spans) == 8 and result.outputs == reference.outputs


async def test_a_control_primitive_that_raises_fails_its_query_by_name(monkeypatch) -> None:
    # Control primitives run inline, inside the primitive whose outputs made them ready; an
    # error there still reaches the query, naming the control primitive, and the app serves on.
    import dataclasses

    from ayo.scheduler.ir import functions

    spec = functions.MAP_FUNCTIONS["format_docs"]

    def boom(config, docs):
        raise ValueError("cannot format these documents")

    async with App.fake() as app:
        good = await app.run("naive_rag", {"question": "why"})
        monkeypatch.setitem(
            functions.MAP_FUNCTIONS, "format_docs", dataclasses.replace(spec, func=boom)
        )
        with pytest.raises(ExecutionError, match="cannot format these documents") as info:
            await app.run("naive_rag", {"question": "why"})
        monkeypatch.setitem(functions.MAP_FUNCTIONS, "format_docs", spec)
        again = await app.run("naive_rag", {"question": "why"})
        depths = app.engines.queue_depths()
    assert info.value.node == "synthesis.format" and again.outputs == good.outputs
    assert all(d == 0 for d in depths.values())


@pytest.mark.parametrize("optimize", [False, True])
async def test_stream_yields_the_answer_as_it_is_written(optimize: bool) -> None:
    async with App.fake() as app:
        events = [e async for e in app.stream("advanced_rag", INPUTS, optimize=optimize)]
        whole = await app.run("advanced_rag", INPUTS, optimize=optimize)
    deltas, last = events[:-1], events[-1]
    assert len(deltas) > 3 and last.result is not None
    assert "".join(e.delta for e in deltas) == last.result.outputs["answer"]
    assert last.result.outputs == whole.outputs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_workflows())
def test_random_workflows_through_the_runtime_equal_the_reference(case) -> None:
    """Random workflows (the graph tests' generator): optimized and unoptimized plans of four
    queries at once through the engine schedulers equal the reference executor's outputs."""
    workflow, inputs, profiles = case
    queries = [{**inputs, "question": q} for q in QUESTIONS]

    async def main():
        app = App(profiles=profiles, builtin_apps=False)
        for name, engine in fake_engines().items():
            app.add_engine(name, engine)
        app.add_workflow(workflow)
        async with app:
            runs = [app.run(workflow.name, q, optimize=o) for q in queries for o in (False, True)]
            results = await asyncio.wait_for(asyncio.gather(*runs), timeout=20)
            leaks = (app.engines.instances("llm")[0].open_sequences,
                     set(app.engines.instances("index")[0].collections))  # fmt: skip
        return [r.outputs for r in results], leaks

    outs, (open_seqs, collections) = asyncio.run(main())
    for k, q in enumerate(queries):
        ctx = CompileContext(profiles, shape=InputShape.of(q))
        plan = compile_workflow(workflow, ctx, optimize=False)
        want = asyncio.run(GraphRun(plan, q, fake_engines()).run())
        assert outs[2 * k] == outs[2 * k + 1] == want
    assert open_seqs == 0 and collections == {"default"}
