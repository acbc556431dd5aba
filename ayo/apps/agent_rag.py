"""agent_rag: multi-hop questions answered by searching the wiki as many times as the model
decides (an Agent module: its graph grows at run time, one step at a time)."""

from __future__ import annotations

from ayo.scheduler import Prompt
from ayo.workflow import Agent, InputShape, Workflow, WorkflowBuilder

from .base import AppTemplate
from .rag import ANSWER_TOKENS, STOP

SYSTEM = (
    "You answer questions with facts from an encyclopedia. Search it for each fact you need, "
    "one search at a time, with the name of the person, place or thing the fact is about as "
    "the query. Then answer in one or two sentences."
)
MAX_STEPS = 3  # two searches at most, then the answer
CALL_TOKENS = 48  # a search call is ~20 tokens; the answer's own cap applies to its step


def build_agent_rag(
    shape: InputShape, answer_tokens: int = ANSWER_TOKENS, max_sentences: int = 0
) -> Workflow:
    """``max_sentences``: the answer's sentence limit (0: none; it still ends at the RAG apps'
    stops). benchmarks.quality, tune split: two sentences 23% accurate (ramble 17%), none 31%
    (ramble 34%; without the stops 31%, ramble 51%): the model's correct answers often quote a
    whole passage, the fact past its second sentence."""
    if answer_tokens < 1:
        raise ValueError(f"answer_tokens must be >= 1, got {answer_tokens}")
    wf = WorkflowBuilder("agent_rag")
    question = wf.input("question")
    out = wf.add(
        Agent(
            "agent",
            Prompt("{question}"),
            {"question": question},
            tools=("search",),
            system=SYSTEM,
            max_steps=MAX_STEPS,
            max_tokens=max(answer_tokens, CALL_TOKENS),
            required_steps=1,  # a 135M model answers from memory unless made to search first
            parallel=False,
            k=2,
            stop=STOP,
            max_sentences=max_sentences,
        )
    )
    wf.output("answer", out["answer"])
    wf.output("steps", out["steps"])
    return wf.build()


AGENT_RAG = AppTemplate(
    "agent_rag",
    "an agent: search the wiki as many times as the model decides (at most 2), then answer",
    ("question",),
    (),
    build_agent_rag,
)
