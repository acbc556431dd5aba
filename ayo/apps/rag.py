"""naive_rag and advanced_rag, as in the paper's document QA workloads."""

from __future__ import annotations

from ayo.scheduler import PortType, Prompt
from ayo.workflow import (
    TEMP,
    Aggregate,
    Indexing,
    InputShape,
    Map,
    PortRef,
    QueryExpansion,
    Rerank,
    Search,
    Synthesis,
    Workflow,
    WorkflowBuilder,
)

from .base import AppTemplate

# Chat prompts for small instruct models: one short instruction, the passages, then the
# question last. Measured on benchmarks.quality's questions with SmolLM2-135M, the question
# after the context answers more of them correctly than the question first (the order that
# would let the prefill split compute the question ahead of retrieval), so quality wins; the
# static start of each prompt is shared through the prefix cache instead.
SYSTEM = "Answer the question with the facts in the context. Reply in one or two sentences."
ANSWER = Prompt.chat("Context:\n{context}\n\nQuestion: {question}", system=SYSTEM)
EXPAND = Prompt.chat(
    "Write three short web search queries for this question, one per line, without numbers."
    "\nQuestion: {question}"
)
REFINE = Prompt.chat(
    "Context:\n{context}\n\nQuestion: {question}\nDraft answer: {answer}\n\n"
    "Correct or complete the draft answer with the context. Reply with the answer only.",
    system=SYSTEM,
)
# Answers stop at a blank line, at an invented next turn or after two sentences, whichever
# comes first (small models otherwise go on with "Question: ..." pairs or restate the answer).
STOP = ("\n\n", "\nQuestion:", "\nContext:")
MAX_SENTENCES = 2
ANSWER_TOKENS = 96  # a ceiling: answers end at two sentences first


def answering(tokens: int = ANSWER_TOKENS) -> dict[str, object]:
    """How every answer of the built-in apps is decoded: its stops, at most ``tokens``."""
    if tokens < 1:
        raise ValueError(f"answer_tokens must be >= 1, got {tokens}")
    return {"max_tokens": tokens, "stop": STOP, "max_sentences": MAX_SENTENCES}


NAIVE_K = 2  # passages one answer reads: measured better than 3 for the 135M model
# advanced_rag reranks the first 12 fused candidates: on the quality questions, reranking 8,
# 12, 16 or 24 of them put the gold article in the top 3 equally often, at a fraction of the
# embedding work of all ~50.
RERANK_CANDIDATES = 12


def _collection(wf: WorkflowBuilder, shape: InputShape) -> str | PortRef:
    """Index the query's documents into a per-query collection, or search the default one."""
    if not shape.has("documents"):
        return "default"
    docs = wf.input("documents", PortType.TEXT_LIST)
    return wf.add(Indexing("indexing", documents=docs, collection=TEMP))["collection"]


def build_naive_rag(shape: InputShape, answer_tokens: int = ANSWER_TOKENS) -> Workflow:
    wf = WorkflowBuilder("naive_rag")
    question = wf.input("question")
    collection = _collection(wf, shape)
    hits = wf.add(Search("retrieval", query=question, k=NAIVE_K, collection=collection))
    answer = wf.add(
        Synthesis(
            "synthesis",
            ANSWER,
            {"question": question, "context": hits["docs"]},
            **answering(answer_tokens),
        )
    )
    wf.output("answer", answer["answer"])
    wf.output("sources", _ids(wf, "sources", hits["docs"]))
    return wf.build()


def _ids(wf: WorkflowBuilder, name: str, docs: PortRef) -> PortRef:
    """The ids of ``docs`` (the passages an answer was written from), for the query's output."""
    return wf.add(Map(name, "doc_ids", {"docs": docs}))["value"]


ADVANCED_SYNTHESES = ("one_shot", "refine")


def build_advanced_rag(
    shape: InputShape,
    answer_tokens: int = ANSWER_TOKENS,
    synthesis: str = "one_shot",
    passages: int = NAIVE_K,
) -> Workflow:
    """``synthesis``: ``one_shot`` (one answer over the reranked top ``passages``, as
    naive_rag's: the expansion only widens what the rerank chooses from) or ``refine`` (a chain
    over them, each passage rewriting the previous draft). benchmarks.quality, tune split:
    one_shot over 2 passages 77% accurate, over 3 57%, refine over 3 (the app before) 54%; the
    refine steps lost what the first draft had, and a third passage adds noise the 135M model
    copies."""
    if synthesis not in ADVANCED_SYNTHESES:
        raise ValueError(f"synthesis must be one of {ADVANCED_SYNTHESES}, got {synthesis!r}")
    if passages < 1:
        raise ValueError(f"passages must be >= 1, got {passages}")
    wf = WorkflowBuilder("advanced_rag")
    question = wf.input("question")
    collection = _collection(wf, shape)
    # The question is searched as well as its expansions and the hit lists are fused by rank,
    # so a poor expansion can add candidates but never push out what the question finds.
    asked = wf.add(Search("retrieval_question", query=question, k=16, collection=collection))
    queries = wf.add(QueryExpansion("expansion", EXPAND, {"question": question}, n=3))
    expanded = wf.add(Search("retrieval", query=queries["queries"], k=16, collection=collection))
    hits = wf.add(Aggregate("hits", a=asked["docs"], b=expanded["docs"], mode="merge"))
    best = wf.add(
        Rerank(
            "rerank",
            query=question,
            docs=hits["value"],
            top_k=passages,
            candidates=RERANK_CANDIDATES,
        )
    )
    chain = {"mode": "refine", "steps": passages, "refine_prompt": REFINE}
    answer = wf.add(
        Synthesis(
            "synthesis",
            ANSWER,
            {"question": question, "context": best["docs"]},
            **(chain if synthesis == "refine" else {}),
            **answering(answer_tokens),
        )
    )
    wf.output("answer", answer["answer"])
    wf.output("sources", _ids(wf, "sources", best["docs"]))
    return wf.build()


NAIVE_RAG = AppTemplate(
    "naive_rag",
    "embed the question (and index given documents), search top 2, one-shot answer",
    ("question",),
    ("documents",),
    build_naive_rag,
)
ADVANCED_RAG = AppTemplate(
    "advanced_rag",
    "expand to 3 queries, search them and the question 16 each, fuse, rerank to top 2, one "
    "answer over them",
    ("question",),
    ("documents",),
    build_advanced_rag,
)
