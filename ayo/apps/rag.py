"""naive_rag and advanced_rag, as in the paper's document QA workloads."""

from __future__ import annotations

from ayo.scheduler import PortType, Prompt
from ayo.workflow import (
    TEMP,
    Indexing,
    InputShape,
    PortRef,
    QueryExpansion,
    Rerank,
    Search,
    Synthesis,
    Workflow,
    WorkflowBuilder,
)

from .base import AppTemplate

SYSTEM = (
    "You are a careful assistant that answers questions using only the provided context. "
    "If the context does not contain the answer, say that you do not know. Be brief.\n"
)
ANSWER = Prompt(SYSTEM + "Question: {question}\nContext:\n{context}\nAnswer:")
EXPAND = Prompt(
    "Write three different search queries that would help answer the question below, "
    "one query per line, without numbering.\nQuestion: {question}\nQueries:\n"
)
REFINE = Prompt(
    SYSTEM + "Question: {question}\nNew context:\n{context}\nExisting answer: {answer}\n"
    "Refine the existing answer with the new context if it helps; otherwise repeat it.\nAnswer:"
)


def _collection(wf: WorkflowBuilder, shape: InputShape) -> str | PortRef:
    """Index the query's documents into a per-query collection, or search the default one."""
    if not shape.has("documents"):
        return "default"
    docs = wf.input("documents", PortType.TEXT_LIST)
    return wf.add(Indexing("indexing", documents=docs, collection=TEMP))["collection"]


def build_naive_rag(shape: InputShape) -> Workflow:
    wf = WorkflowBuilder("naive_rag")
    question = wf.input("question")
    collection = _collection(wf, shape)
    hits = wf.add(Search("retrieval", query=question, k=3, collection=collection))
    answer = wf.add(Synthesis("synthesis", ANSWER, {"question": question, "context": hits["docs"]}))
    wf.output("answer", answer["answer"])
    return wf.build()


def build_advanced_rag(shape: InputShape) -> Workflow:
    wf = WorkflowBuilder("advanced_rag")
    question = wf.input("question")
    collection = _collection(wf, shape)
    queries = wf.add(QueryExpansion("expansion", EXPAND, {"question": question}, n=3))
    hits = wf.add(Search("retrieval", query=queries["queries"], k=16, collection=collection))
    best = wf.add(Rerank("rerank", query=question, docs=hits["docs"], top_k=3))
    answer = wf.add(
        Synthesis(
            "synthesis",
            ANSWER,
            {"question": question, "context": best["docs"]},
            mode="refine",
            steps=3,
            refine_prompt=REFINE,
        )
    )
    wf.output("answer", answer["answer"])
    return wf.build()


NAIVE_RAG = AppTemplate(
    "naive_rag",
    "embed the question (and index given documents), search top 3, one-shot answer",
    ("question",),
    ("documents",),
    build_naive_rag,
)
ADVANCED_RAG = AppTemplate(
    "advanced_rag",
    "expand to 3 queries, search 16 each, rerank to top 3, refine answer over them",
    ("question",),
    ("documents",),
    build_advanced_rag,
)
