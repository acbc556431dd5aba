"""Chat prompts rendered per model, decodes that stop (items, sentences, stop strings), the
Score primitive behind Judge and reciprocal rank fusion, on the deterministic fakes."""

from __future__ import annotations

import asyncio

import pytest

from ayo.passes import CompileContext, compile_workflow
from ayo.scheduler import (
    DEFAULT_PROFILES,
    Doc,
    EngineProfile,
    GraphRun,
    LatencyModel,
    Op,
    PromptError,
    RegexTokenizer,
)
from ayo.scheduler.ir.functions import get_map
from ayo.scheduler.ir.prompt import Prompt
from ayo.scheduler.sim.fakes import FakeLLM, fake_engines
from ayo.workflow import Judge, QueryExpansion, Search, Synthesis, WorkflowBuilder


def _chat(messages: list[dict[str, str]]) -> str:
    return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages) + "<assistant>"


class ChatTokenizer(RegexTokenizer):
    render_chat = staticmethod(_chat)


def test_chat_prompt_renders_messages_keeping_placeholders_and_braces():
    p = Prompt.chat("Q: {question} {{literal}}\n{context}", system="Be brief.", assistant="A:")
    assert p.placeholders == ("question", "context")
    assert p.template == "Be brief.\nQ: {question} {{literal}}\n{context}\nA:"  # plain form
    model = p.for_model(_chat)
    assert model.messages == () and model.placeholders == ("question", "context")
    assert model.template == (
        "<system>Be brief.</system><user>Q: {question} {{literal}}\n{context}</user><assistant>A:"
    )
    rendered = model.render({"question": "why?", "context": "c"})
    assert rendered == "<system>Be brief.</system><user>Q: why? {literal}\nc</user><assistant>A:"
    assert p.for_model(None) == Prompt(p.template)  # a base model: plain text
    assert p.for_model(lambda m: None) == Prompt(p.template)  # a model without a template
    with pytest.raises(PromptError, match="dropped or repeated"):
        p.for_model(lambda m: "no placeholders left")
    with pytest.raises(PromptError, match="role"):
        Prompt("x", messages=(("robot", "x"),))


def _rag(prompt: Prompt):
    wf = WorkflowBuilder("chat_rag")
    question = wf.input("question")
    hits = wf.add(Search("retrieval", query=question, k=2))
    context = {"question": question, "context": hits["docs"]}
    answer = wf.add(Synthesis("synthesis", prompt, context, max_tokens=16, stop=("\n",)))
    wf.output("answer", answer["answer"])
    return wf.build()


def test_plans_carry_the_rendered_prompt_and_the_split_keeps_a_prefix():
    prompt = Prompt.chat("Question: {question}\nContext: {context}", system="Use the context.")
    # a retrieval slow enough that the LLM has idle time for the early part
    slow = EngineProfile(latency=LatencyModel(50.0, 1.0))
    ctx = CompileContext({**DEFAULT_PROFILES, "embedder": slow}, tokenizer=ChatTokenizer())
    for optimize in (False, True):
        plan = compile_workflow(_rag(prompt), ctx, optimize=optimize)
        prompts = [n.config.prompt_or_none for n in plan.nodes if n.config.prompt_or_none]
        assert prompts and all(p.template.startswith("<system>Use the") for p in prompts)
    partial = next(n for n in plan.nodes if n.op == Op.PARTIAL_PREFILL)
    head = partial.config.prompt.template[: partial.config.split_at]
    assert head.endswith("Question: {question}\nContext: ")  # the question goes in early
    decode = next(n for n in plan.nodes if n.op == Op.DECODE)
    assert decode.config.params.stop == ("\n",) and decode.config.params.max_tokens == 16


class CountingLLM(FakeLLM):
    """Writes ten query lines, a few characters a piece, counting the pieces taken."""

    def __init__(self) -> None:
        super().__init__()
        self.taken = 0

    def answer(self, prompt: str) -> str:
        return "".join(f"- query number {i}\n" for i in range(10))

    async def _decode(self, seq, params):
        async for piece in super()._decode(seq, params):
            self.taken += 1
            yield piece


@pytest.mark.parametrize("optimize", [False, True])
def test_expansion_ends_its_decode_after_n_items(optimize):
    wf = WorkflowBuilder("expand")
    question = wf.input("question")
    queries = wf.add(QueryExpansion("expansion", Prompt("{question}"), {"question": question}, n=2))
    wf.output("queries", queries["queries"])
    plan = compile_workflow(wf.build(), CompileContext(), optimize=optimize)
    llm = CountingLLM()
    out = asyncio.run(GraphRun(plan, {"question": "q"}, {"llm": llm}).run())
    assert out["queries"] == ["query number 0", "query number 1"]
    written = len("- query number 0\n- query number 1\n")
    assert llm.taken <= written // 5 + 1 < len(llm.answer("")) // 5  # stopped, not run out
    assert llm.open_sequences == 0


def test_judge_scores_its_options_and_optimized_equals_unoptimized():
    wf = WorkflowBuilder("judge")
    question = wf.input("question")
    judge = wf.add(Judge("judge", Prompt("Is {question} a fact?"), {"question": question}))
    wf.output("decision", judge["decision"])
    wf.output("probability", judge["probability"])
    seen = set()
    for q in ("rivers", "bread and glass", "hello", "stars", "the moon", "what"):
        outs = []
        for optimize in (False, True):
            plan = compile_workflow(wf.build(), CompileContext(), optimize=optimize)
            assert any(n.op == Op.SCORE for n in plan.nodes)
            engines = fake_engines()
            outs.append(asyncio.run(GraphRun(plan, {"question": q}, engines).run()))
            assert engines["llm"].open_sequences == 0
        assert outs[0] == outs[1]
        p = outs[0]["probability"]
        assert 0 <= p <= 1 and outs[0]["decision"] == (p >= 0.5)
        seen.add(outs[0]["decision"])
    assert seen == {True, False}


def test_fuse_ranks_sums_reciprocal_ranks_and_breaks_ties_by_best_rank_then_id():
    fuse = get_map("fuse_ranks").func
    a = [Doc("x", "X", 0.9, 0), Doc("y", "Y", 0.8, 1), Doc("z", "Z", 0.7, 2)]
    b = [Doc("z", "Z", 0.5, 0), Doc("w", "W", 0.4, 1)]
    fused = fuse({}, a + b)
    assert [d.id for d in fused] == ["z", "x", "w", "y"]  # z in both; y and w tie: by id
    assert [d.rank for d in fused] == [0, 1, 2, 3]
    assert [d.id for d in fuse({}, b + a)] == ["z", "x", "w", "y"]  # arrival order is moot
    assert [d.id for d in fuse({"limit": 2}, a + b)] == ["z", "x"]
    assert [d.id for d in fuse({}, [Doc("b", "B", 0, 0), Doc("a", "A", 0, 0)])] == ["a", "b"]
