"""The LlamaIndex side of ``python -m benchmarks.peers``: naive_rag and advanced_rag written the
way a LlamaIndex user writes them, on Hugging Face transformers.

    PEER_PYTHON benchmarks/peers_llamaindex.py JOB.json RESULT.json

Run by the peer virtual environment's interpreter (LlamaIndex, transformers,
sentence-transformers; never Ayo's). The driver writes the job (model and embedder folders,
the chunks Ayo stored, Ayo's prompt templates and app settings, the questions, the loads) and
reads the result: build times, peak RSS, and per query the answer, the latency and every LLM
call (the prompt string, its token ids, how many tokens were generated).

The pipelines, and what each step mirrors on Ayo's side:

- every LLM call: Ayo's prompts as the model reads them (its chat template rendered on Ayo's
  side); an answer ends where Ayo's ends (``StopLikeAyo``: the end token, a stop string, or the
  last allowed sentence, judged on the text Ayo's engine would have released; the expansion
  after its n-th distinct query line), and its text is cut the same way.
- naive_rag: ``VectorIndexRetriever`` (top k) -> ``PlainPassages`` -> ``SimpleSummarize`` with
  Ayo's ANSWER prompt: one LLM call whose context is the passages a blank line apart, as Ayo's
  ``format_docs``.
- advanced_rag: ``FusedQueriesRetriever`` (a ``QueryFusionRetriever``: the LLM writes the
  queries with Ayo's EXPAND prompt; the question and each query searched for top k, fused by
  reciprocal rank as Ayo's ``fuse_ranks``) -> ``EmbeddingCosineRerank`` (the first candidates by
  cosine of the same embedder, as Ayo's default reranker) -> ``Refine`` with ANSWER, then REFINE,
  one passage per call.

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

# Ayo's "lines" parser (ayo.scheduler.ir.parsers): one query per non-empty line, a leading list
# marker ("- ", "1. ") removed, a repeat of an earlier query dropped. LlamaIndex's own parser
# keeps markers and strips backticks.
_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_EDGE = " \t.,;:!?\"'()[]"
# Ayo's sentence end (ayo.scheduler.ir.parsers.SentenceLimit) and reciprocal rank constant.
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s")
RRF_K = 60
# Ayo's placeholders -> the variables LlamaIndex's synthesizers fill.
_QA_VARS = {"question": "query_str", "context": "context_str"}
_REFINE_VARS = {"question": "query_str", "context": "context_msg", "answer": "existing_answer"}
_EXPAND_VARS = {"question": "query"}


def parse_lines(text: str) -> list[str]:
    items = (_MARKER.sub("", line).strip() for line in text.split("\n"))
    out, seen = [], set()
    for item in items:
        key = " ".join(item.lower().split()).strip(_EDGE)
        if key and key not in seen:
            seen.add(key)
            out.append(item)
    return out


def held_back(text: str, stops: list[str]) -> int:
    """Trailing characters Ayo's engine holds back because they could begin a stop string
    (``ayo.engines.llm.stop.held_back``, restated: this interpreter cannot import Ayo; the
    tests check the two agree)."""
    hold = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:n]):
                hold = n
                break
    return hold


def answer_cut(text: str, stops: list[str], max_sentences: int) -> tuple[str, bool]:
    """Ayo's answer end on ``text`` so far: (the answer, whether it is over). A stop string
    ends it before the stop; else the ``max_sentences``-th complete sentence in the released
    text (everything but what could begin a stop string) ends it after its end mark."""
    cuts = [i for i in (text.find(s) for s in stops) if i >= 0]
    if cuts:
        return text[: min(cuts)], True
    released = text[: len(text) - held_back(text, stops)]
    if max_sentences:
        ends = list(_SENTENCE_END.finditer(released))
        if len(ends) >= max_sentences:
            return released[: ends[max_sentences - 1].end() - 1], True
    return text, False


def lines_done(text: str, n: int) -> bool:
    """The expansion has written ``n`` distinct queries, each ended by a newline."""
    return len(parse_lines(text[: text.rfind("\n") + 1])) >= n


def llama_template(template: str, names: dict[str, str]) -> str:
    """Ayo's ``{question}`` style template with LlamaIndex's variable names."""
    for ours, theirs in names.items():
        template = template.replace("{" + ours + "}", "{" + theirs + "}")
    return template


def _static_prefix(template: str) -> str:
    """The text of a ``{name}`` template before its first placeholder."""
    return template.split("{")[0]


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
    from transformers import StoppingCriteria, StoppingCriteriaList

    class StopLikeAyo(StoppingCriteria):
        """Ends a generation where Ayo's decode of the same call ends (see ``answer_cut`` and
        ``lines_done``); the model's end token is left to ``generate``."""

        def __init__(self, tokenizer: Any, prompt_len: int, rule: dict[str, Any]) -> None:
            self.tokenizer, self.prompt_len, self.rule = tokenizer, prompt_len, rule

        def text(self, ids: Any) -> str:
            return self.tokenizer.decode(ids[self.prompt_len :], skip_special_tokens=True)

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> bool:
            text = self.text(input_ids[0])
            if "items" in self.rule:
                return lines_done(text, self.rule["items"])
            return answer_cut(text, self.rule["stop"], self.rule["max_sentences"])[1]

    class RecordingLLM(HuggingFaceLLM):
        """``HuggingFaceLLM`` that ends each completion as Ayo does (``rule_for``) and records
        it: prompt, prompt ids, new tokens."""

        _calls: list = PrivateAttr(default_factory=list)
        _rules: list = PrivateAttr(default_factory=list)  # (prompt prefix, rule)

        def add_rule(self, prefix: str, rule: dict[str, Any]) -> None:
            self._rules.append((prefix, rule))

        def rule_for(self, prompt: str) -> dict[str, Any] | None:
            return next((r for p, r in self._rules if prompt.startswith(p)), None)

        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            ids = self._tokenizer(prompt)["input_ids"]  # what complete() tokenizes
            rule = self.rule_for(prompt)
            base = self._stopping_criteria
            if rule is not None:
                stop = StopLikeAyo(self._tokenizer, len(ids), rule)
                self._stopping_criteria = StoppingCriteriaList([*base, stop])
            try:
                response = super().complete(prompt, formatted=formatted, **kwargs)
            finally:
                self._stopping_criteria = base
            output = response.raw["model_output"][0].tolist()
            if output[: len(ids)] != ids:
                raise RuntimeError("the recorded prompt is not what the model was given")
            if rule is not None and "items" not in rule:
                response.text = answer_cut(response.text, rule["stop"], rule["max_sentences"])[0]
            self._calls.append(
                {"prompt": prompt, "prompt_ids": ids, "generated": len(output) - len(ids)}
            )
            return response

        def take_calls(self) -> list[dict]:
            calls, self._calls = self._calls, []
            return calls

    class PlainPassages(BaseNodePostprocessor):
        """The passages' texts stripped, each but the last followed by a newline: joined by
        ``SimpleSummarize`` with newlines they are a blank line apart (Ayo's format_docs)."""

        def _postprocess_nodes(self, nodes: list, query_bundle: Any = None) -> list:
            texts = [n.node.get_content(metadata_mode=MetadataMode.LLM).strip() for n in nodes]
            return [
                NodeWithScore(
                    node=TextNode(
                        id_=n.node.node_id, text=t + ("\n" if i < len(nodes) - 1 else "")
                    ),
                    score=n.score,
                )
                for i, (n, t) in enumerate(zip(nodes, texts))
            ]

    class EmbeddingCosineRerank(BaseNodePostprocessor):
        """The first ``candidates`` passages reranked by cosine of question and passage
        embeddings (Ayo's default reranker, ``embedding-cosine``, after its ``fuse_ranks``
        limit); the ``top_n`` best, ties kept in retrieval order."""

        embed_model: BaseEmbedding
        top_n: int = 3
        candidates: int = 0

        def _postprocess_nodes(self, nodes: list, query_bundle: Any = None) -> list:
            nodes = nodes[: self.candidates] if self.candidates else nodes
            if not nodes:
                return []
            query = np.asarray(self.embed_model.get_query_embedding(query_bundle.query_str))
            texts = [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in nodes]
            passages = np.asarray(self.embed_model.get_text_embedding_batch(texts))
            scores = passages @ query  # unit vectors (normalize=True): cosine
            order = np.argsort(-scores, kind="stable")[: self.top_n]
            return [NodeWithScore(node=nodes[i].node, score=float(scores[i])) for i in order]

    class FusedQueriesRetriever(QueryFusionRetriever):
        """``QueryFusionRetriever`` as Ayo's advanced_rag: the question and the LLM's queries
        (its lines parsed as Ayo's) each searched for top k, the hit lists fused by reciprocal
        rank as Ayo's ``fuse_ranks`` (``1 / (RRF_K + rank + 1)`` summed over lists, ties by the
        best rank, then id; the stock fusion uses ``1 / (k + rank)`` and breaks ties by order).
        ``num_queries`` counts the question, as in the base class: n queries is n + 1."""

        async def _aget_queries(self, original_query: str) -> list:
            prompt = self.query_gen_prompt.format(
                num_queries=self.num_queries - 1, query=original_query
            )
            response = await self._llm.acomplete(prompt)
            return [QueryBundle(q) for q in parse_lines(response.text)[: self.num_queries - 1]]

        async def _aretrieve(self, query_bundle: Any) -> list:
            queries = [query_bundle, *await self._aget_queries(query_bundle.query_str)]
            results = await self._run_async_queries(queries)
            fused: dict[str, list] = {}
            for hits in results.values():
                for rank, hit in enumerate(hits):
                    entry = fused.setdefault(hit.node.node_id, [0.0, rank, hit])
                    entry[0] += 1.0 / (RRF_K + rank + 1)
                    entry[1] = min(entry[1], rank)
            order = sorted(fused.items(), key=lambda kv: (-kv[1][0], kv[1][1], kv[0]))
            return [NodeWithScore(node=e[2].node, score=e[0]) for _, e in order]

    return {
        "RecordingLLM": RecordingLLM,
        "PlainPassages": PlainPassages,
        "EmbeddingCosineRerank": EmbeddingCosineRerank,
        "FusedQueriesRetriever": FusedQueriesRetriever,
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
        answers = {"stop": spec["stop"], "max_sentences": spec["max_sentences"]}
        for key in ("answer", "refine"):
            if key in spec:
                self.llm.add_rule(_static_prefix(spec[key]), answers)
        if "expand" in spec:
            self.llm.add_rule(_static_prefix(spec["expand"]), {"items": spec["queries"]})
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
            node_postprocessors=[self.parts["PlainPassages"]()],
        )

    def _advanced(self, spec: dict[str, Any]) -> Any:
        from llama_index.core import PromptTemplate, get_response_synthesizer
        from llama_index.core.query_engine import RetrieverQueryEngine

        retriever = self.parts["FusedQueriesRetriever"](
            [self.index.as_retriever(similarity_top_k=spec["k"])],
            llm=self.llm,
            query_gen_prompt=llama_template(spec["expand"], _EXPAND_VARS),
            num_queries=spec["queries"] + 1,
            similarity_top_k=(spec["queries"] + 1) * spec["k"],
        )
        if "refine" in spec:
            synthesizer = get_response_synthesizer(
                llm=self.llm,
                response_mode="refine",
                text_qa_template=self._qa_prompt(spec),
                refine_template=PromptTemplate(llama_template(spec["refine"], _REFINE_VARS)),
            )
        else:  # one answer over the reranked passages, as _naive's
            synthesizer = get_response_synthesizer(
                llm=self.llm,
                response_mode="simple_summarize",
                text_qa_template=self._qa_prompt(spec),
            )
        rerank = self.parts["EmbeddingCosineRerank"](
            embed_model=self.embed, top_n=spec["top_k"], candidates=spec["candidates"]
        )
        # the reranked passages a blank line apart, as Ayo's prompt has them (as _naive's)
        plain = self.parts["PlainPassages"]()
        return RetrieverQueryEngine(retriever, synthesizer, node_postprocessors=[rerank, plain])


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
