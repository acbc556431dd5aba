"""The OpenAI endpoints' workflows, internal (not listed as apps), run as any query is.

- ``@completion``: a prompt's token ids decoded under the request's sampling parameters, one
  Generate primitive (``/v1/completions`` runs one query per prompt, ``/v1/chat/completions``
  one for the rendered conversation);
- ``@embedding``: texts embedded, one Embed primitive (``/v1/embeddings``).
"""

from __future__ import annotations

from ayo.scheduler import PortType
from ayo.workflow import Embed, Generate, Workflow, WorkflowBuilder


def completion_workflow(llm: str = "llm") -> Workflow:
    wf = WorkflowBuilder("@completion")
    prompt = wf.input("prompt", PortType.ANY)
    params = wf.input("params", PortType.ANY)
    out = wf.add(Generate("completion", prompt, params, llm=llm))
    wf.output("completion", out["completion"])
    return wf.build()


def embedding_workflow(embedder: str = "embedder") -> Workflow:
    wf = WorkflowBuilder("@embedding")
    texts = wf.input("texts", PortType.TEXT_LIST)
    out = wf.add(Embed("embed", texts, embedder=embedder))
    wf.output("vectors", out["vectors"])
    return wf.build()


COMPLETION = completion_workflow()
EMBEDDING = embedding_workflow()
