"""search_gen: a judge LLM decides whether to search; a core LLM answers."""

from __future__ import annotations

from ayo.scheduler import Prompt
from ayo.workflow import (
    Aggregate,
    Condition,
    InputShape,
    Judge,
    KeywordSearch,
    Map,
    Synthesis,
    Workflow,
    WorkflowBuilder,
)

from .base import AppTemplate

JUDGE = Prompt(
    "Decide whether answering the question below needs a web search for recent or specific facts. "
    "Reply with yes or no only.\nQuestion: {question}\nReply:"
)
ANSWER = Prompt(
    "You are a helpful assistant. Answer the question in two or three sentences, using the search "
    "results when there are any.\nQuestion: {question}\nSearch results:\n{context}\nAnswer:"
)


def build_search_gen(shape: InputShape) -> Workflow:
    wf = WorkflowBuilder("search_gen")
    question = wf.input("question")
    judge = wf.add(Judge("judge", JUDGE, {"question": question}, llm="judge"))
    branch = wf.add(Condition("branch", flag=judge["decision"], value=question))
    hits = wf.add(KeywordSearch("search", query=branch["then"], k=4))
    found = wf.add(Map("results", "format_docs", {"docs": hits["docs"]}))
    none = wf.add(Map("no_results", "empty_text", {"value": branch["else"]}))
    context = wf.add(Aggregate("context", a=found["value"], b=none["value"]))
    answer = wf.add(
        Synthesis("answer", ANSWER, {"question": question, "context": context["value"]}, llm="llm")
    )
    wf.output("answer", answer["answer"])
    wf.output("searched", judge["decision"])
    return wf.build()


SEARCH_GEN = AppTemplate(
    "search_gen",
    "judge LLM decides whether to search; keyword search top 4; core LLM answers",
    ("question",),
    (),
    build_search_gen,
)
