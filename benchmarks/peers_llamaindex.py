"""The LlamaIndex side of ``python -m benchmarks.peers``: naive_rag and advanced_rag written the
way a LlamaIndex user writes them, on Hugging Face transformers.

    PEER_PYTHON benchmarks/peers_llamaindex.py JOB.json RESULT.json

Run by the peer virtual environment's interpreter (LlamaIndex, transformers,
sentence-transformers; never Ayo's). The driver writes the job (model and embedder folders,
the chunks Ayo stored, Ayo's prompt templates and app settings, the questions, the loads) and
reads the result: build times, peak RSS, and per query the answer, the latency and every LLM
call (the prompt string, its token ids, how many tokens were generated).

The pipelines, and what each step mirrors on Ayo's side:

- naive_rag: ``VectorIndexRetriever`` (top k) -> ``NumberedPassages`` -> ``SimpleSummarize`` with
  Ayo's ANSWER prompt: one LLM call whose context is ``"[1] text\\n[2] text..."``, as Ayo's
  ``format_docs``.
- advanced_rag: ``ExpandedQueriesRetriever`` (a ``QueryFusionRetriever``: the LLM writes the
  queries with Ayo's EXPAND prompt, each searched for top k) -> ``EmbeddingCosineRerank`` (cosine
  of the same embedder, as Ayo's default reranker) -> ``Refine`` with ANSWER, then REFINE, one
  passage per call.

Concurrent queries are ``asyncio.gather`` of ``aquery``, as LlamaIndex users write them;
``HuggingFaceLLM`` inherits ``CustomLLM.acomplete``, which calls the blocking ``complete`` on the
event loop, so the queries take turns at the LLM (only the embedding calls run in threads).

Only the standard library is imported at the top: the heavy imports wait until the script's
own folder (``benchmarks/``, whose ``kernels.py`` would shadow the ``kernels`` package that
transformers looks for) is off ``sys.path``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import re
import resource
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("benchmarks.peers_llamaindex")

# Ayo's "lines" parser (ayo.scheduler.parsers): one query per non-empty line, a leading list
# marker ("- ", "1. ") removed. LlamaIndex's own parser keeps markers and strips backticks.
_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
# Ayo's placeholders -> the variables LlamaIndex's synthesizers fill.
_QA_VARS = {"question": "query_str", "context": "context_str"}
_REFINE_VARS = {"question": "query_str", "context": "context_msg", "answer": "existing_answer"}
_EXPAND_VARS = {"question": "query"}


def parse_lines(text: str) -> list[str]:
    items = (_MARKER.sub("", line).strip() for line in text.split("\n"))
    return [item for item in items if item]


def llama_template(template: str, names: dict[str, str]) -> str:
    """Ayo's ``{question}`` style template with LlamaIndex's variable names."""
    for ours, theirs in names.items():
        template = template.replace("{" + ours + "}", "{" + theirs + "}")
    return template


def _joined_context(**kwargs: Any) -> str:
    """``SimpleSummarize`` passes its one truncated chunk as a list, which a template would
    render as ``"['...']"``; this function mapping renders the text itself."""
    context = kwargs["context_str"]
    return context if isinstance(context, str) else "\n".join(context)


# ---- building blocks (defined once LlamaIndex is importable) ---------------------------------


def define_components() -> dict[str, type]:
    """The LLM recorder, the two postprocessors and the retriever, as LlamaIndex subclasses."""
    import numpy as np
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
    from llama_index.llms.huggingface import HuggingFaceLLM

    class RecordingLLM(HuggingFaceLLM):
        """``HuggingFaceLLM`` that records each completion: prompt, prompt ids, new tokens."""

        _calls: list = PrivateAttr(default_factory=list)

        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            response = super().complete(prompt, formatted=formatted, **kwargs)
            ids = self._tokenizer(prompt)["input_ids"]  # what complete() tokenized
            output = response.raw["model_output"][0].tolist()
            if output[: len(ids)] != ids:
                raise RuntimeError("the recorded prompt is not what the model was given")
            self._calls.append(
                {"prompt": prompt, "prompt_ids": ids, "generated": len(output) - len(ids)}
            )
            return response

        def take_calls(self) -> list[dict]:
            calls, self._calls = self._calls, []
            return calls

    class NumberedPassages(BaseNodePostprocessor):
        """Each passage as ``"[i] text"``, numbered from 1 in rank order (Ayo's format_docs)."""

        def _postprocess_nodes(self, nodes: list, query_bundle: Any = None) -> list:
            return [
                NodeWithScore(
                    node=TextNode(
                        id_=n.node.node_id,
                        text=f"[{i}] {n.node.get_content(metadata_mode=MetadataMode.LLM)}",
                    ),
                    score=n.score,
                )
                for i, n in enumerate(nodes, 1)
            ]

    class EmbeddingCosineRerank(BaseNodePostprocessor):
        """The ``top_n`` passages by cosine of question and passage embeddings (Ayo's default
        reranker, ``embedding-cosine``), ties kept in retrieval order."""

        embed_model: BaseEmbedding
        top_n: int = 3

        def _postprocess_nodes(self, nodes: list, query_bundle: Any = None) -> list:
            if not nodes:
                return []
            query = np.asarray(self.embed_model.get_query_embedding(query_bundle.query_str))
            texts = [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in nodes]
            passages = np.asarray(self.embed_model.get_text_embedding_batch(texts))
            scores = passages @ query  # unit vectors (normalize=True): cosine
            order = np.argsort(-scores, kind="stable")[: self.top_n]
            return [NodeWithScore(node=nodes[i].node, score=float(scores[i])) for i in order]

    class ExpandedQueriesRetriever(QueryFusionRetriever):
        """``QueryFusionRetriever`` as Ayo's QueryExpansion -> Search: only the LLM's queries
        are searched (the stock one adds the question itself), its lines parsed as Ayo's, and
        the hits kept in query then rank order with repeats dropped (Ayo's Search concatenates
        and its Rerank dedupes; the stock one sorts by score and cuts to ``similarity_top_k``).
        ``num_queries`` counts the question, as in the base class: n queries is n + 1."""

        async def _aget_queries(self, original_query: str) -> list:
            prompt = self.query_gen_prompt.format(
                num_queries=self.num_queries - 1, query=original_query
            )
            response = await self._llm.acomplete(prompt)
            return [QueryBundle(q) for q in parse_lines(response.text)[: self.num_queries - 1]]

        async def _aretrieve(self, query_bundle: Any) -> list:
            queries = await self._aget_queries(query_bundle.query_str)
            results = await self._run_async_queries(queries)
            seen: dict[str, Any] = {}
            for hits in results.values():
                for hit in hits:
                    seen.setdefault(hit.node.node_id, hit)
            return list(seen.values())

    return {
        "RecordingLLM": RecordingLLM,
        "NumberedPassages": NumberedPassages,
        "EmbeddingCosineRerank": EmbeddingCosineRerank,
        "ExpandedQueriesRetriever": ExpandedQueriesRetriever,
    }


class Peer:
    """The models and the index, built once; ``engine(app)`` gives that app's query engine."""

    def __init__(self, job: dict[str, Any]) -> None:
        import torch
        from llama_index.core import Settings, VectorStoreIndex
        from llama_index.core.schema import TextNode
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.job = job
        self.parts = define_components()
        t0 = time.perf_counter()
        folder, name = job["model"]["folder"], job["model"]["gguf_file"]
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        self.llm = self.parts["RecordingLLM"](
            model=model.eval(),
            tokenizer=tokenizer,
            model_name=str(Path(folder) / name),
            tokenizer_name=str(Path(folder) / name),
            max_new_tokens=job["max_new_tokens"],
            generate_kwargs={"do_sample": False},
            device_map="cpu",
        )
        self.embed = HuggingFaceEmbedding(model_name=job["embedder"], device="cpu")
        Settings.llm, Settings.embed_model = self.llm, self.embed
        # Token counts for prompt fitting with the model's own tokenizer (the default is
        # tiktoken's, which it would download).
        Settings.tokenizer = functools.partial(tokenizer.encode, add_special_tokens=False)
        self.models_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        nodes = [
            TextNode(
                id_=c["id"],
                text=c["text"],
                metadata={"title": c["title"]} if c["title"] else {},
                excluded_llm_metadata_keys=["title"],  # the LLM sees the chunk; the embedder
                metadata_template="{value}",  # "title\nchunk", as Ayo's store embeds it
                text_template="{metadata_str}\n{content}",
            )
            for c in job["chunks"]
        ]
        self.index = VectorStoreIndex(nodes, embed_model=self.embed)
        self.index_s = time.perf_counter() - t0

    def engine(self, app: str) -> Any:
        spec = self.job["apps"][app]
        return self._advanced(spec) if "expand" in spec else self._naive(spec)

    def _qa_prompt(self, spec: dict[str, Any]) -> Any:
        from llama_index.core import PromptTemplate

        return PromptTemplate(
            llama_template(spec["answer"], _QA_VARS),
            function_mappings={"context_str": _joined_context},
        )

    def _naive(self, spec: dict[str, Any]) -> Any:
        from llama_index.core import get_response_synthesizer
        from llama_index.core.query_engine import RetrieverQueryEngine

        synthesizer = get_response_synthesizer(
            llm=self.llm, response_mode="simple_summarize", text_qa_template=self._qa_prompt(spec)
        )
        return RetrieverQueryEngine(
            self.index.as_retriever(similarity_top_k=spec["k"]),
            synthesizer,
            node_postprocessors=[self.parts["NumberedPassages"]()],
        )

    def _advanced(self, spec: dict[str, Any]) -> Any:
        from llama_index.core import PromptTemplate, get_response_synthesizer
        from llama_index.core.query_engine import RetrieverQueryEngine

        retriever = self.parts["ExpandedQueriesRetriever"](
            [self.index.as_retriever(similarity_top_k=spec["k"])],
            llm=self.llm,
            query_gen_prompt=llama_template(spec["expand"], _EXPAND_VARS),
            num_queries=spec["queries"] + 1,
            similarity_top_k=spec["queries"] * spec["k"],
        )
        synthesizer = get_response_synthesizer(
            llm=self.llm,
            response_mode="refine",
            text_qa_template=self._qa_prompt(spec),
            refine_template=PromptTemplate(llama_template(spec["refine"], _REFINE_VARS)),
        )
        rerank = self.parts["EmbeddingCosineRerank"](embed_model=self.embed, top_n=spec["top_k"])
        return RetrieverQueryEngine(retriever, synthesizer, node_postprocessors=[rerank])


# ---- measurements ------------------------------------------------------------------------------


async def run_serial(peer: Peer, engine: Any, questions: list[str]) -> list[dict[str, Any]]:
    """Each question alone: answer, latency, and the LLM calls it made."""
    rows = []
    for question in questions:
        peer.llm.take_calls()
        t0 = time.perf_counter()
        response = await engine.aquery(question)
        latency = time.perf_counter() - t0
        rows.append(
            {
                "question": question,
                "answer": response.response,
                "latency_s": latency,
                "calls": peer.llm.take_calls(),
            }
        )
    return rows


async def run_concurrent(peer: Peer, engine: Any, questions: list[str]) -> dict[str, Any]:
    """All ``questions`` submitted at once with ``asyncio.gather`` of ``aquery``."""
    start = time.perf_counter()

    async def one(question: str) -> tuple[str, float]:
        response = await engine.aquery(question)
        return response.response, time.perf_counter() - start

    done = await asyncio.gather(*(one(q) for q in questions))
    wall = time.perf_counter() - start
    peer.llm.take_calls()
    return {"wall_s": wall, "answers": [a for a, _ in done], "latencies_s": [t for _, t in done]}


async def measure(peer: Peer, app: str) -> dict[str, Any]:
    job = peer.job
    engine = peer.engine(app)
    t0 = time.perf_counter()
    await engine.aquery(job["warmup_question"])
    out: dict[str, Any] = {"warmup_s": time.perf_counter() - t0}
    peer.llm.take_calls()
    log.info("LlamaIndex %s: warm-up %.1f s", app, out["warmup_s"])
    out["serial"] = await run_serial(peer, engine, job["questions"])
    out["concurrent"] = {}
    for n in job["concurrency"]:
        batch = [job["questions"][i % len(job["questions"])] for i in range(n)]
        out["concurrent"][str(n)] = await run_concurrent(peer, engine, batch)
        log.info("LlamaIndex %s: %d at once in %.1f s", app, n,
                 out["concurrent"][str(n)]["wall_s"])  # fmt: skip
    return out


def peak_rss_mb() -> float:
    """This process's peak resident set: ``VmHWM``, which starts afresh at ``execve``
    (``ru_maxrss`` on Linux carries over the parent's peak through fork and exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def versions() -> dict[str, str]:
    from importlib.metadata import version

    names = ("llama-index-core", "llama-index-llms-huggingface",
             "llama-index-embeddings-huggingface", "transformers", "sentence-transformers",
             "torch")  # fmt: skip
    return {n: version(n) for n in names}


def main(argv: list[str] | None = None) -> int:
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != Path(here)]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("job", type=Path)
    p.add_argument("result", type=Path)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "sentence_transformers", "llama_index", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    job = json.loads(args.job.read_text())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(job["threads"])
    peer = Peer(job)
    log.info("LlamaIndex: models %.1f s, index of %d chunks %.1f s",
             peer.models_s, len(job["chunks"]), peer.index_s)  # fmt: skip
    result: dict[str, Any] = {"models_s": peer.models_s, "index_s": peer.index_s, "apps": {}}
    for app in job["apps"]:
        result["apps"][app] = asyncio.run(measure(peer, app))
    result.update(
        rss_mb=peak_rss_mb(),
        torch_threads=torch.get_num_threads(),
        versions=versions(),
        imported_ayo=any(m == "ayo" or m.startswith("ayo.") for m in sys.modules),
    )
    args.result.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
