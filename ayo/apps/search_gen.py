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
from .rag import ANSWER_TOKENS, answering

# The judge's answer is never decoded: Judge compares the probabilities of " question" and
# " chat" as the next word (one prefill each). A few labelled examples as plain text, not a chat
# turn: on held-out messages SmolLM2-135M then gave fact questions 0.27-0.90 and chit-chat at
# most 0.02, while asked Yes/No in its chat template it scored both alike (0.12-0.49).
JUDGE = Prompt(
    "Message: What is the capital of France?\nType: question\n\n"
    "Message: Thanks a lot!\nType: chat\n\n"
    "Message: Who painted the Mona Lisa?\nType: question\n\n"
    "Message: Hi, how are you?\nType: chat\n\n"
    "Message: When did World War II end?\nType: question\n\n"
    "Message: That's funny.\nType: chat\n\n"
    "Message: {question}\nType:"
)
JUDGE_OPTIONS = (" question", " chat")
JUDGE_THRESHOLD = 0.1
ANSWER = Prompt.chat(
    "Search results (empty if none were needed):\n{context}\n\n{question}",
    system="You are a helpful assistant. Reply in one or two sentences; use the search results "
    "when there are any.",
)


def build_search_gen(shape: InputShape, answer_tokens: int = ANSWER_TOKENS) -> Workflow:
    wf = WorkflowBuilder("search_gen")
    question = wf.input("question")
    judge = wf.add(
        Judge(
            "judge",
            JUDGE,
            {"question": question},
            llm="judge",
            options=JUDGE_OPTIONS,
            threshold=JUDGE_THRESHOLD,
        )
    )
    branch = wf.add(Condition("branch", flag=judge["decision"], value=question))
    hits = wf.add(KeywordSearch("search", query=branch["then"], k=4))
    found = wf.add(Map("results", "format_docs", {"docs": hits["docs"]}))
    none = wf.add(Map("no_results", "empty_text", {"value": branch["else"]}))
    context = wf.add(Aggregate("context", a=found["value"], b=none["value"]))
    answer = wf.add(
        Synthesis(
            "answer",
            ANSWER,
            {"question": question, "context": context["value"]},
            llm="llm",
            **answering(answer_tokens),
        )
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
