"""The built-in apps as they were before chat templates and stopping (commit 9ae0cb8), kept so
``benchmarks.quality`` can measure before and after in one run.

Raw completion prompts tokenized as plain text, every answer decoded to ``max_tokens`` (no stop
strings; the model's end token still ends a decode), the expansion's queries alone searched,
and a judge that decodes 8 tokens and reads ``startswith("yes")``. Registered as
``<app>@legacy``. What could not be kept: the reranker's input is now deduplicated by
``fuse_ranks`` (reciprocal rank, the same set of passages as the old ``unique_docs``) and the
expansion's parser drops repeated queries.
"""

from __future__ import annotations

from ayo.apps.base import AppTemplate
from ayo.scheduler import Prompt
from ayo.scheduler.ir import primitives as P
from ayo.workflow import (
    Aggregate,
    Condition,
    InputShape,
    KeywordSearch,
    Map,
    Primitive,
    QueryExpansion,
    Rerank,
    Search,
    Synthesis,
    Workflow,
    WorkflowBuilder,
)

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
JUDGE = Prompt(
    "Decide whether answering the question below needs a web search for recent or specific facts. "
    "Reply with yes or no only.\nQuestion: {question}\nReply:"
)
SEARCH_ANSWER = Prompt(
    "You are a helpful assistant. Answer the question in two or three sentences, using the search "
    "results when there are any.\nQuestion: {question}\nSearch results:\n{context}\nAnswer:"
)


def _ids(wf: WorkflowBuilder, docs):
    return wf.add(Map("sources", "doc_ids", {"docs": docs}))["value"]


def naive_rag(shape: InputShape) -> Workflow:
    wf = WorkflowBuilder("naive_rag@legacy")
    question = wf.input("question")
    hits = wf.add(Search("retrieval", query=question, k=3))
    answer = wf.add(Synthesis("synthesis", ANSWER, {"question": question, "context": hits["docs"]}))
    wf.output("answer", answer["answer"])
    wf.output("sources", _ids(wf, hits["docs"]))
    return wf.build()


def advanced_rag(shape: InputShape) -> Workflow:
    wf = WorkflowBuilder("advanced_rag@legacy")
    question = wf.input("question")
    queries = wf.add(QueryExpansion("expansion", EXPAND, {"question": question}, n=3))
    hits = wf.add(Search("retrieval", query=queries["queries"], k=16))
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
    wf.output("sources", _ids(wf, best["docs"]))
    return wf.build()


def search_gen(shape: InputShape) -> Workflow:
    wf = WorkflowBuilder("search_gen@legacy")
    question = wf.input("question")
    prefill = wf.add(
        Primitive("judge_prefill", P.prefill("p", "judge", JUDGE), {"question": question})
    )
    decode = wf.add(Primitive("judge_decode", P.decode("d", "judge", 8), {"seq": prefill["seq"]}))
    decision = wf.add(Map("judge", "parse_yes_no", {"text": decode["text"]}))
    branch = wf.add(Condition("branch", flag=decision["value"], value=question))
    hits = wf.add(KeywordSearch("search", query=branch["then"], k=4))
    found = wf.add(Map("results", "format_docs", {"docs": hits["docs"]}))
    none = wf.add(Map("no_results", "empty_text", {"value": branch["else"]}))
    context = wf.add(Aggregate("context", a=found["value"], b=none["value"]))
    answer = wf.add(
        Synthesis("answer", SEARCH_ANSWER, {"question": question, "context": context["value"]})
    )
    wf.output("answer", answer["answer"])
    wf.output("searched", decision["value"])
    return wf.build()


LEGACY_APPS = {
    name: AppTemplate(f"{name}@legacy", f"{name} before chat templates", ("question",), (), build)
    for name, build in (
        ("naive_rag", naive_rag),
        ("advanced_rag", advanced_rag),
        ("search_gen", search_gen),
    )
}
