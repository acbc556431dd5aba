"""contextual_rag: an LLM writes a context for each chunk at ingestion (contextual retrieval)."""

from __future__ import annotations

from ayo.scheduler import PortType, Prompt
from ayo.workflow import (
    TEMP,
    Indexing,
    InputShape,
    Rerank,
    Search,
    Synthesis,
    Workflow,
    WorkflowBuilder,
)

from .base import AppTemplate
from .rag import ANSWER, ANSWER_TOKENS, _ids, answering

CONTEXT = Prompt.chat(
    "Write one short sentence that says what this passage is about.\nPassage: {chunk}"
)


def build_contextual_rag(shape: InputShape, answer_tokens: int = ANSWER_TOKENS) -> Workflow:
    wf = WorkflowBuilder("contextual_rag")
    question = wf.input("question")
    documents = wf.input("documents", PortType.TEXT_LIST)
    index = wf.add(
        Indexing("indexing", documents=documents, collection=TEMP, context_prompt=CONTEXT)
    )
    hits = wf.add(Search("retrieval", query=question, k=32, collection=index["collection"]))
    best = wf.add(Rerank("rerank", query=question, docs=hits["docs"], top_k=3))
    answer = wf.add(
        Synthesis(
            "synthesis",
            ANSWER,
            {"question": question, "context": best["docs"]},
            **answering(answer_tokens),
        )
    )
    wf.output("answer", answer["answer"])
    wf.output("sources", _ids(wf, "sources", best["docs"]))
    return wf.build()


CONTEXTUAL_RAG = AppTemplate(
    "contextual_rag",
    "LLM writes a context per chunk at ingestion; search 32, rerank to top 3, one-shot answer",
    ("question", "documents"),
    (),
    build_contextual_rag,
)
