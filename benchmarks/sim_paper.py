"""Optimized vs module by module on the simulator, in the paper's setting or ours.

    python -m benchmarks.scheduler --profiles paper-gpu|default|measured --workload paper|default
        [--queries 8] [--ablate] [--apps ...]

Every built-in app runs its queries one at a time in both modes on simulated engines
(``ayo.scheduler.sim.simulation``: each engine its own resource, latencies from its profile on a
virtual clock, the LLM batching continuously and decoding to each call's ``max_tokens``). Beside
each speedup: the paper's figure for the app and the query's critical-path bound (``bound.py``).

Profiles:

- ``paper-gpu``: engines like the paper's testbed (Llama-2-7B on an RTX 3090, bge-large,
  bge-reranker-large, pgvector), each figure derived below from the hardware's limits;
- ``default``: the constants the planner uses without a measurement;
- ``measured``: the profile measured on this machine by the real engines' first start
  (``--data-dir``; the LLM in float32 with one thread, as ``benchmarks.e2e`` runs it).

Workloads: ``paper``: each document-QA query brings 666 passages of ~80 tokens (the Ayo
prototype's example workload), contextual_rag's 16, answers capped at 10 tokens; ``default``:
the apps' inputs of ``benchmarks.scheduler`` (no documents, or four short ones), answers at the
apps' own ceiling (96 tokens).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ayo.apps import APPS
from ayo.runtime.app import App
from ayo.runtime.engine_set import SchedulerConfig
from ayo.scheduler import DEFAULT_PROFILES, EngineProfile, LatencyModel
from ayo.scheduler.batching.policies import BatchLimits
from ayo.scheduler.sim.simulation import run_virtual, sim_engines

from .common import print_table
from .e2e_core import Query, ablation_configs, run_ablation, run_serial, serial_bounds

PROFILE_SETS = ("paper-gpu", "default", "measured")
SIM_WORKLOADS = ("paper", "default")

# Llama-2-7B in fp16 on an RTX 3090 (936 GB/s, 71 TFLOP/s fp16 tensor): a decode step reads the
# 13.5 GB of weights, 14.4 ms at the bandwidth limit, ~20 ms as served; each sequence in the
# step adds its 13.5 GFLOP (0.2 ms); a prefill token costs 13.5 GFLOP at ~40 TFLOP/s achieved,
# 0.35 ms.
_PAPER_LLM = EngineProfile(efficient_batch=16, latency=LatencyModel(20.0, 0.2, 0.35))
PAPER_GPU: Mapping[str, EngineProfile] = {
    "llm": _PAPER_LLM,
    "judge": _PAPER_LLM,
    # bge-large-en-v1.5 (335M parameters): an ~80-token passage is 54 GFLOP, 1.3 ms at ~40
    # TFLOP/s; a few ms per batch for tokenizing and launching
    "embedder": EngineProfile(efficient_batch=64, latency=LatencyModel(5.0, 1.3)),
    # bge-reranker-large (560M): a (question, passage) pair of ~110 tokens, 1.6 ms; the
    # prototype's reranker batches 32 pairs
    "reranker": EngineProfile(efficient_batch=32, latency=LatencyModel(15.0, 1.6)),
    # pgvector over a local socket: a statement's round trip 1.5 ms, an HNSW insert or search
    # 0.5 ms per vector
    "index": EngineProfile(efficient_batch=64, latency=LatencyModel(1.5, 0.5)),
    "index.Ingest": EngineProfile(efficient_batch=64, latency=LatencyModel(1.5, 0.5)),
    "keyword": EngineProfile(efficient_batch=64, latency=LatencyModel(1.5, 0.5)),
}

# The paper's speedups of optimized over module-by-module (Teola/Ayo, ASPLOS'25), by our app
PAPER_SPEEDUPS = {
    "naive_rag": "1.62-1.67x",
    "advanced_rag": "2.03-2.09x",
    "search_gen": "1.79x",
    "contextual_rag": "1.06-1.59x",
}
PAPER_PASSAGES = 666  # the prototype's example: each query brings 666 passages
CONTEXTUAL_PASSAGES = 16
ANSWER_TOKENS = 10
WORDS = ["rivers", "stars", "bread", "engines", "music", "forests", "glass", "trains"]


def profile_set(name: str, data_dir: Path | None = None) -> dict[str, EngineProfile]:
    """The named profiles (see the module doc), over the defaults for any engine not named."""
    if name == "paper-gpu":
        return {**DEFAULT_PROFILES, **PAPER_GPU}
    if name == "default":
        return dict(DEFAULT_PROFILES)
    if name == "measured":
        from ayo.runtime.corpus import default_data_dir
        from ayo.runtime.defaults import DEFAULT_LLM
        from ayo.runtime.profiling import profile_path, read_profiles

        path = profile_path(Path(data_dir or default_data_dir()), DEFAULT_LLM, "float32", 1)
        measured = read_profiles(path)
        if measured is None:
            raise SystemExit(
                f"no measured profile at {path}: run `python -m benchmarks.e2e --data-dir "
                f"{path.parent.parent}` once (it measures the engines at first start)"
            )
        return {**DEFAULT_PROFILES, **measured, "judge": measured["llm"]}
    raise ValueError(f"unknown profiles {name!r}; choose from {', '.join(PROFILE_SETS)}")


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def sim_queries(app: str, workload: str, n: int, seed: int) -> list[Query]:
    """``n`` queries of ``app``: a question, and the documents the workload brings (passages
    of 60 words, ~80 tokens, for the paper's)."""
    out: list[Query] = []
    for i in range(n):
        rng = random.Random(f"{seed}:{app}:{i}")
        inputs: dict[str, Any] = {"question": _text(rng, 6) + "?"}
        takes = APPS[app].required + APPS[app].optional
        if "documents" in takes:
            if workload == "paper":
                count = CONTEXTUAL_PASSAGES if app == "contextual_rag" else PAPER_PASSAGES
                inputs["documents"] = [_text(rng, 60) for _ in range(count)]
            elif "documents" in APPS[app].required or app == "advanced_rag":
                inputs["documents"] = [_text(rng, 120) for _ in range(4)]
        out.append((app, inputs))
    return out


def sim_app(profiles: Mapping[str, EngineProfile], workload: str) -> App:
    """An App on the simulated engines (the LLM runs 16 sequences at once, the others one
    batch of up to 32 items at a time; the judge is the LLM, as in the default engines), apps
    built with the workload's answer cap."""
    app = App(profiles=profiles, policy="critical_path")
    engines = sim_engines(profiles)
    engines["judge"] = engines["llm"]
    for name, engine in engines.items():
        config = (
            SchedulerConfig("critical_path", max_running=16)
            if engine.kind == "llm"
            else SchedulerConfig("critical_path", BatchLimits(max_items=32))
        )
        app.add_engine(name, engine, config=config)
    if workload == "paper":
        for name in APPS:
            app.add_workflow(APPS[name].with_options(answer_tokens=ANSWER_TOKENS))
    return app


async def _measure(
    profiles: Mapping[str, EngineProfile], workload: str, apps: Sequence[str], n: int,
    seed: int, ablate: bool,
) -> tuple[list[list[object]], list[Any]]:  # fmt: skip
    rows: list[list[object]] = []
    ablations = []
    configs = ablation_configs(("prune", "decompose", "split", "pipeline"))
    async with sim_app(profiles, workload) as app:
        engines = len(app.engines.proxies)  # each its own resource: no core limit
        for name in apps:
            queries = sim_queries(name, workload, n, seed)
            r = await run_serial(app, name, queries)
            bounds = serial_bounds(app, r, queries, {}, cores=engines)
            opt, mbm = r.runs["optimized"].mean_ms, r.runs["module-by-module"].mean_ms
            bound = 1e3 * sum(b.seconds for b in bounds) / len(bounds)
            rows.append([name, f"{opt:.0f}", f"{mbm:.0f}", f"{mbm / opt:.2f}x",
                         PAPER_SPEEDUPS.get(name, "-"), f"{bound:.0f}", f"{mbm / bound:.2f}x",
                         f"{bound / opt:.0%}", f"{r.equal_answers}/{len(queries)}"])  # fmt: skip
            if ablate:
                ablations.append(await run_ablation(app, name, queries, configs))
    return rows, ablations


HEADERS = ["app", "optimized ms", "module-by-module ms", "speedup", "paper", "bound ms",
           "best speedup", "bound / optimized", "equal answers"]  # fmt: skip


def speedup_report(
    profiles_name: str, workload: str, apps: Sequence[str], n: int, seed: int, ablate: bool,
    data_dir: Path | None = None,
) -> None:  # fmt: skip
    """Print the speedup table (and the ablation) of the simulator."""
    from .e2e_report import ABLATION_HEADERS, ablation_rows

    profiles = profile_set(profiles_name, data_dir)
    rows, ablations = run_virtual(_measure(profiles, workload, apps, n, seed, ablate))
    print(f"# simulator: profiles {profiles_name}, workload {workload}, {n} queries per app one "
          "at a time, virtual clock (seeded)")  # fmt: skip
    for key in ("llm", "embedder", "reranker", "index", "index.Ingest", "keyword"):
        if key in profiles:
            lat = profiles[key].latency
            print(f"#   {key}: {lat.fixed_ms:g} ms + {lat.per_item_ms:g} ms/item + "
                  f"{lat.per_token_ms:g} ms/token, efficient batch {profiles[key].efficient_batch}")  # fmt: skip
    print_table(HEADERS, rows)
    if ablations:
        print("# pass ablation (simulator)")
        print_table(ABLATION_HEADERS, ablation_rows(ablations))
