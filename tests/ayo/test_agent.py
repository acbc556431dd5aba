"""The Agent module over fake engines: the graph grows step by step (each step's primitives in
the trace as they happen); a tool starts before the decode that wrote its call ends; the
conversation is one sequence whose tokens are each prefilled once; tools that fail, hang or
return what JSON cannot hold become error results the model reads; optimized == unoptimized."""

from __future__ import annotations

import asyncio
import json

import pytest

from ayo.engines.llm.outputs import DecodePiece
from ayo.engines.llm.tools import ToolCall, call_text
from ayo.runtime.app import App
from ayo.scheduler import PlanError, Prompt, register_tool
from ayo.scheduler.sim.fakes import CHARS_PER_TOKEN, FakeLLM, fake_engines
from ayo.workflow import Agent, WorkflowBuilder


async def _lookup(word: str) -> dict:
    await asyncio.sleep(0.03)
    return {"word": word, "meaning": f"the meaning of {word}"}


def _boom(word: str) -> str:
    raise RuntimeError(f"no entry for {word}")


async def _hang(word: str) -> str:
    await asyncio.sleep(10)
    return word


WORD = {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}
register_tool("lookup", _lookup, "Look a word up", WORD)
register_tool("boom", _boom, "Always fails", WORD)
register_tool("hang", _hang, "Never answers in time", WORD, timeout_s=0.05)
register_tool("opaque", lambda word: object(), "Returns no JSON", WORD)


class ScriptedLLM(FakeLLM):
    """Writes tool calls on its first turn, the answer once it has read the results; appends
    what it decodes to the sequence, as the real engine does."""

    cut = False
    script = ("lookup", "boom", "hang", "opaque")

    async def _decode(self, seq, params):
        await self._take_held(seq)
        prompt = self.prompt_text(seq)
        if "</tool_response>" not in prompt:
            calls = [ToolCall("", n, json.dumps({"query" if n == "search" else "word": "ayo"}))
                     for n in self.script]  # fmt: skip
            text = "Let me look.\n" + "\n".join(call_text(c) for c in calls)
            if self.cut:  # and a fifth call that max_tokens cuts short
                text += "\n" + call_text(ToolCall("", "lookup", '{"word": "zzz"}'))[:-20]
        else:
            text = "Ayo means joy."
        for index, start in enumerate(range(0, len(text), CHARS_PER_TOKEN)):
            await asyncio.sleep(0.002)
            piece = text[start : start + CHARS_PER_TOKEN]
            token = self.tokenizer.piece_id(piece)
            self._seqs[seq].append(token)
            yield DecodePiece(token, piece, index)


def _workflow(max_steps: int = 3, **answer):
    wf = WorkflowBuilder("agent_test")
    question = wf.input("question")
    out = wf.add(Agent("agent", Prompt("Q: {question}"), {"question": question},
                       tools=("lookup", "boom", "hang", "opaque", "search"),
                       max_steps=max_steps, **answer))  # fmt: skip
    wf.output("answer", out["answer"])
    wf.output("steps", out["steps"])
    return wf.build()


def _app(max_steps: int = 3, **answer) -> tuple[App, ScriptedLLM]:
    app, llm = App(), ScriptedLLM(name="llm")
    for name, engine in {**fake_engines(), "llm": llm}.items():
        app.add_engine(name, engine)
    app.add_workflow(_workflow(max_steps, **answer))
    return app, llm


async def _run(optimize: bool):
    app, llm = _app()
    async with app:
        result = await app.run("agent_test", {"question": "What does ayo mean?"}, optimize=optimize)
    return result, llm


async def test_the_graph_grows_tools_pipeline_and_the_prefix_is_prefilled_once():
    result, llm = await _run(optimize=True)
    steps, summary = result.outputs["steps"][:-1], result.outputs["steps"][-1]
    assert result.outputs["answer"] == "Ayo means joy." and summary["finish_reason"] == "stop"
    [first, second] = steps
    results = {c["name"]: c["result"] for c in first["calls"]}
    assert json.loads(results["lookup"])["meaning"] == "the meaning of ayo"
    assert results["boom"].startswith("error: RuntimeError: no entry for ayo")
    assert results["hang"].startswith("error: tool 'hang' took longer than 0.05 s")
    assert results["opaque"].startswith("error: TypeError")
    assert "calls" not in second
    spans = {s.node_id: s for s in result.trace.spans}
    grown = sorted(n for n in spans if n.startswith("agent.agent.step"))
    assert grown == sorted([
        "agent.agent.step1.prefill", "agent.agent.step1.decode", "agent.agent.step1.lookup0",
        "agent.agent.step1.boom1", "agent.agent.step1.hang2", "agent.agent.step1.opaque3",
        "agent.agent.step2.prefill", "agent.agent.step2.decode"])  # fmt: skip
    # the first call's tool ran while the model was still writing the later calls
    assert spans["agent.agent.step1.lookup0"].start < spans["agent.agent.step1.decode"].end
    assert spans["agent.agent.step1.boom1"].start < spans["agent.agent.step1.opaque3"].start
    # one sequence; every token of it sent to prefill once, the decoded ones never
    assert summary["reprefilled"] == 0 and summary["prefilled"] == sum(llm.prefill_calls)
    assert len(llm.prefill_calls) == 2


async def test_optimized_equals_unoptimized():
    fast, _ = await _run(optimize=True)
    slow, _ = await _run(optimize=False)
    assert fast.outputs == slow.outputs


async def test_the_step_limit_ends_with_a_clear_reason():
    app, _ = _app(max_steps=1)
    async with app:
        result = await app.run("agent_test", {"question": "?"})
    # the last step has no tools: what the scripted model writes is the answer, unrun
    [step, summary] = result.outputs["steps"]
    assert summary["finish_reason"] == "max_steps" and "calls" not in step
    assert result.outputs["answer"].startswith("Let me look.\n<tool_call>")


async def test_the_answer_ends_at_its_stop_string_or_sentence_limit():
    for answer, expected in (
        ({"max_sentences": 1}, "Let me look."),
        ({"stop": ("look",)}, "Let me"),
    ):
        app, _ = _app(max_steps=1, **answer)
        async with app:
            result = await app.run("agent_test", {"question": "?"})
        assert result.outputs["answer"] == expected


async def test_a_call_cut_short_is_not_run_and_not_the_answer():
    app, llm = _app()
    llm.cut = True
    async with app:
        result = await app.run("agent_test", {"question": "What does ayo mean?"})
    first = result.outputs["steps"][0]
    assert [c["name"] for c in first["calls"]] == ["lookup", "boom", "hang", "opaque", "lookup"]
    assert first["calls"][-1]["result"].startswith("error: the call was cut short")
    assert result.outputs["answer"] == "Ayo means joy."
    spans = [s.node_id for s in result.trace.spans]
    assert "agent.agent.step1.lookup4" not in spans  # never run


async def test_an_engine_failing_under_the_search_tool_fails_the_query():
    """A tool's own failure is the model's to read; the runtime's engines failing is not:
    the query fails with the error, naming the agent."""
    from ayo.scheduler import ExecutionError

    app, llm = _app()
    llm.script = ("lookup", "search")

    async def broken(texts, *, info=None):
        raise RuntimeError("embedder down")

    app.engines.instances("embedder")[0].embed = broken
    async with app:
        with pytest.raises(ExecutionError, match="embedder down"):
            await app.run("agent_test", {"question": "What does ayo mean?"})


def test_unknown_tools_and_bad_limits_are_refused_when_built():
    q = WorkflowBuilder("w").input("q")
    with pytest.raises(PlanError, match="unknown tool 'nope'"):
        Agent("a", Prompt("{q}"), {"q": q}, tools=("nope",))
    with pytest.raises(PlanError, match="required_steps"):
        Agent("a", Prompt("{q}"), {"q": q}, max_steps=2, required_steps=2)
