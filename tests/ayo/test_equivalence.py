"""Optimized and unoptimized plans give the same outputs on deterministic fake engines."""

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ayo.apps import APPS
from ayo.passes import CompileContext, compile_workflow
from ayo.scheduler import EngineProfile, ExecutionError, GraphRun, LatencyModel, PortType, Prompt
from ayo.scheduler.sim.fakes import FakeEmbedder, FakeLLM, FakeReranker, fake_engines
from ayo.workflow import (
    TEMP,
    Aggregate,
    Condition,
    Indexing,
    InputShape,
    Judge,
    KeywordSearch,
    Map,
    QueryExpansion,
    Rerank,
    Search,
    Synthesis,
    WorkflowBuilder,
)

T, TL, DL, B = PortType.TEXT, PortType.TEXT_LIST, PortType.DOC_LIST, PortType.BOOL
DOCS = [" ".join(f"w{i}x{j} rivers stars" for j in range(40 + 7 * i)) for i in range(11)]
QUESTIONS = ["what about rivers?", "why do stars shine", "bread and glass", "music of trains", "x"]


def run_both(workflow, inputs, ctx) -> tuple[dict, dict, dict]:
    """Outputs of the unoptimized and optimized plans, each on fresh engines (checked for leaks)."""
    outs = []
    engines_used = []
    for optimize in (False, True):
        plan = compile_workflow(workflow, ctx, optimize=optimize)
        engines = fake_engines()
        outs.append(
            asyncio.run(asyncio.wait_for(GraphRun(plan, inputs, engines).run(), timeout=20))
        )
        assert engines["llm"].open_sequences == 0 and engines["judge"].open_sequences == 0
        assert set(engines["index"].collections) == {"default"}  # per-query collections dropped
        engines_used.append(engines)
    return outs[0], outs[1], engines_used[1]


CASES = [
    (app, n)
    for app, t in sorted(APPS.items())
    for n in (0, 5, 11)
    if (n == 0 and "documents" not in t.required) or (n and "documents" in t.required + t.optional)
]


@pytest.mark.parametrize(("app", "documents"), CASES)
def test_apps_optimized_equal_unoptimized(app: str, documents: int) -> None:
    template = APPS[app]
    for question in QUESTIONS[:3]:
        inputs = {"question": question, **({"documents": DOCS[:documents]} if documents else {})}
        shape = InputShape.of(inputs)
        ctx = CompileContext(
            profiles={
                "llm": EngineProfile(efficient_batch=4),
                "embedder": EngineProfile(efficient_batch=8),
            },
            shape=shape,
        )
        base, opt, _ = run_both(template.workflow(shape), inputs, ctx)
        assert base == opt and base["answer"]


def test_search_gen_takes_both_branches() -> None:
    seen = set()
    for question in QUESTIONS:
        inputs = {"question": question}
        shape = InputShape.of(inputs)
        base, opt, engines = run_both(
            APPS["search_gen"].workflow(shape), inputs, CompileContext(shape=shape)
        )
        assert base == opt
        seen.add(opt["searched"])
        assert (engines["keyword"].calls > 0) == opt["searched"]  # the skipped branch never ran
    assert seen == {True, False}


def test_stage_decomposition_embeds_in_micro_batches() -> None:
    inputs = {"question": "rivers", "documents": DOCS}
    shape = InputShape.of(inputs)
    chunks = sum(-(-len(d.split()) // 64) for d in DOCS)
    # free batches: as many micro-batches of at least 8 as the estimated chunk count allows
    free = LatencyModel(0.0, 1.0)
    profiles = {"embedder": EngineProfile(efficient_batch=8, latency=free),
                "index": EngineProfile(latency=free)}  # fmt: skip
    ctx = CompileContext(profiles=profiles, shape=shape)
    calls = []
    micro = 0
    for optimize in (False, True):
        plan = compile_workflow(APPS["naive_rag"].workflow(shape), ctx, optimize=optimize)
        engines = fake_engines()
        asyncio.run(GraphRun(plan, inputs, engines).run())
        calls.append((engines["embedder"].calls, engines["index"].calls))
        micro = plan.node("indexing.embed").config.micro_batch
    # unoptimized: one Embed of all chunks, one of the question, one Ingest, one Search
    assert calls[0] == (2, 2)
    assert 8 <= micro < chunks
    batches = -(-chunks // micro)
    assert calls[1] == (batches + 1, batches + 1)  # an Ingest per micro-batch, then the Search


class _ObservedLLM(FakeLLM):
    decoding = 0

    async def _decode(self, seq, params):
        type(self).decoding += 1
        try:
            async for piece in super()._decode(seq, params):
                yield piece
        finally:
            type(self).decoding -= 1


class _ObservingEmbedder(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.during_decode: list[bool] = []

    async def embed(self, texts, *, info=None):
        self.during_decode.append(_ObservedLLM.decoding > 0)
        return await super().embed(texts)


@pytest.mark.parametrize("optimize", [False, True])
async def test_pipelined_search_starts_while_the_llm_still_writes(optimize: bool) -> None:
    shape = InputShape.from_sizes(question=1)
    plan = compile_workflow(
        APPS["advanced_rag"].workflow(shape), CompileContext(shape=shape), optimize=optimize
    )
    engines = {**fake_engines(), "llm": _ObservedLLM(), "embedder": _ObservingEmbedder()}
    await GraphRun(plan, {"question": "why do stars shine"}, engines).run()
    assert any(engines["embedder"].during_decode) == optimize


# ---- random workflows -------------------------------------------------------------------------


@st.composite
def random_workflows(draw):
    wf = WorkflowBuilder("random")
    refs = {T: [wf.input("question")], TL: [], DL: [], B: []}
    collections = ["default"]
    n_docs = draw(st.integers(0, 11))
    inputs = {"question": draw(st.sampled_from(QUESTIONS))}
    if n_docs:
        inputs["documents"] = DOCS[:n_docs]
        docs = wf.input("documents", TL)
        ctx_prompt = (
            Prompt("Situate this chunk: {chunk}\nContext:") if draw(st.booleans()) else None
        )
        collections.append(
            wf.add(
                Indexing(
                    "indexing",
                    docs,
                    TEMP,
                    chunk_words=draw(st.integers(5, 60)),
                    context_prompt=ctx_prompt,
                )
            )["collection"]
        )
    pre = draw(st.text(alphabet="abcd .\n", max_size=60))
    for i in range(draw(st.integers(1, 6))):
        kind = draw(
            st.sampled_from(["expand", "search", "keyword", "rerank", "synth", "judge", "merge"])
        )
        pick = lambda t: draw(st.sampled_from(refs[t]))  # noqa: E731
        mid = f"m{i}"
        if kind == "expand":
            h = wf.add(
                QueryExpansion(
                    mid,
                    Prompt(pre + "Queries for {question}:"),
                    {"question": pick(T)},
                    n=draw(st.integers(1, 4)),
                )
            )
            refs[TL].append(h["queries"])
        elif kind == "search":
            query = pick(TL) if refs[TL] and draw(st.booleans()) else pick(T)
            h = wf.add(
                Search(
                    mid,
                    query,
                    k=draw(st.integers(1, 5)),
                    collection=draw(st.sampled_from(collections)),
                )
            )
            refs[DL].append(h["docs"])
        elif kind == "keyword":
            h = wf.add(
                KeywordSearch(
                    mid,
                    pick(TL) if refs[TL] and draw(st.booleans()) else pick(T),
                    k=draw(st.integers(1, 4)),
                )
            )
            refs[DL].append(h["docs"])
        elif kind == "merge" and refs[DL]:
            refs[DL].append(wf.add(Aggregate(mid, pick(DL), pick(DL), mode="merge"))["value"])
        elif kind == "rerank" and refs[DL]:
            refs[DL].append(
                wf.add(Rerank(mid, pick(T), pick(DL), top_k=draw(st.integers(1, 4))))["docs"]
            )
        elif kind == "synth" and refs[DL]:
            mode = draw(st.sampled_from(["one_shot", "refine", "tree"]))
            prompt = Prompt(pre + "Q: {question}\nC: {context}\nA:")
            h = wf.add(
                Synthesis(
                    mid,
                    prompt,
                    {"question": pick(T), "context": pick(DL)},
                    mode=mode,
                    steps=draw(st.integers(1, 4)),
                    refine_prompt=Prompt(pre + "Q: {question}\nC: {context}\nOld: {answer}\nA:"),
                    combine_prompt=Prompt("Q: {question}\nMerge: {answers}\nA:"),
                )
            )
            refs[T].append(h["answer"])
        elif kind == "judge":
            flag = wf.add(
                Judge(
                    mid, Prompt(pre + "Search for {question}?"), {"question": pick(T)}, llm="judge"
                )
            )["decision"]
            branch = wf.add(Condition(f"{mid}c", flag, pick(T)))
            hits = wf.add(KeywordSearch(f"{mid}k", branch["then"], k=2))
            fmt = wf.add(Map(f"{mid}f", "format_docs", {"docs": hits["docs"]}))
            empty = wf.add(Map(f"{mid}e", "empty_text", {"value": branch["else"]}))
            refs[T].append(wf.add(Aggregate(f"{mid}j", fmt["value"], empty["value"]))["value"])
            refs[T].append(branch["then"])  # may be skipped: then left out of the outputs
    for j, t in enumerate((T, TL, DL)):
        if refs[t]:
            wf.output(f"out{j}", refs[t][-1])
    profiles = {
        "llm": EngineProfile(
            efficient_batch=draw(st.integers(1, 8)),
            prefill_split_min_tokens=draw(st.integers(0, 40)),
        ),
        "embedder": EngineProfile(efficient_batch=draw(st.integers(1, 16))),
        "index": EngineProfile(efficient_batch=draw(st.integers(1, 16))),
        "keyword": EngineProfile(efficient_batch=draw(st.integers(1, 4))),
    }
    return wf.build(), inputs, profiles


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_workflows())
def test_random_workflows_optimized_equal_unoptimized(case) -> None:
    workflow, inputs, profiles = case
    ctx = CompileContext(profiles=profiles, shape=InputShape.of(inputs))
    base, opt, _ = run_both(workflow, inputs, ctx)
    assert base == opt


async def test_a_failed_query_releases_sequences_and_collections() -> None:
    class BrokenReranker(FakeReranker):
        async def rerank(self, requests, *, info=None):
            raise RuntimeError("reranker crashed")

    inputs = {"question": "why do stars shine", "documents": DOCS[:5]}
    shape = InputShape.of(inputs)
    plan = compile_workflow(APPS["advanced_rag"].workflow(shape), CompileContext(shape=shape))
    engines = {**fake_engines(), "reranker": BrokenReranker()}
    with pytest.raises(
        ExecutionError,
        match=r"primitive 'rerank\.rerank' \(Rerank\) failed: RuntimeError: reranker crashed",
    ):
        await GraphRun(plan, inputs, engines).run()
    # The PartialPrefills of the refine steps had opened sequences; the temp collection existed.
    assert engines["llm"].open_sequences == 0
    assert set(engines["index"].collections) == {"default"}
