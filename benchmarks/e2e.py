"""End to end: Ayo's optimized plans vs module by module, same engines, same run.

    python -m benchmarks.e2e --data-dir DIR [--workload default|paper] [--apps ...]
        [--questions 8] [--rates 0.5,1] [--max-tokens 32] [--dtype float32]
        [--policy critical_path] [--passes prune,decompose,split,pipeline] [--ablate]
        [--mix] [--out /tmp/ayo-e2e] [--quick]

``--workload paper`` gives each query its own 300-700 passages (the paper's document QA shape,
``workloads.py``) and caps answers at 10 tokens; its default apps are all four. After the
table come the serial queries' critical-path bounds (``bound.py``: the least latency any
schedule could reach, from each query's module-by-module run) beside the measured latencies.
``--passes`` chooses what the optimized mode runs; ``--ablate`` adds a table of every app's
serial queries under each pass alone, all but one, and all.

``--policy fcfs,depth,critical_path`` runs everything once per policy (a fresh App on fresh
engines each time) at the same offered rates (those of the first policy's serial capacity)
and adds a policy table, a latency-vs-rate plot per policy and, per policy, a Gantt of the LLM
engine's steps in the highest-rate optimized run, coloured by query. ``--mix`` runs the apps
together (question ``i`` to app ``i mod len(apps)``; contextual_rag gets three seeded wiki
summaries as its documents). ``--ray`` runs everything twice, with the LLM as one local
instance and as one local + one remote replica (a Ray actor on a second node of a loopback
cluster), and adds what a remote call costs, measured in the same run (``e2e_ray.py``).

Engines: the embedded default (SmolLM2-135M-Instruct, all-MiniLM-L6-v2, the reranker over it,
faiss + BM25 over the ``wiki`` collection of ``--data-dir``, ingested first when missing), one
torch thread each by default, so that two engines compute at once on a 2-core CPU.
Questions: a seeded sample of the fanoutqa dev set (the ``fanoutqa`` package's bundled file;
for the paper workload, sub-questions whose answer is in one wiki summary, the gold article).
For each app: every question one at a time in both modes, then Poisson arrivals at each
``--rates`` multiple of the module-by-module mode's serial capacity (1 / its mean latency).
Prints one table (mean / p50 / p99 latency, throughput, speedup = module-by-module /
optimized, answers equal per question) and writes JSON, a latency-vs-rate plot and a Gantt
picture of one advanced_rag query per mode to ``--out`` (see ``benchmarks/e2e_core.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ayo.cluster.remote import RemoteEngine
from ayo.passes import PASSES, pass_set
from ayo.scheduler.batching.policies import POLICIES

from .bound import WORKERS, Bound
from .common import machine, print_table, setup_benchmark_logging
from .e2e_core import (
    MODES,
    AblationResult,
    Plan,
    SettingResult,
    ablation_configs,
    run_ablation,
    run_all,
    serial_bounds,
)
from .e2e_ray import SETUPS, clear_prefix_cache, engine_options, start_cluster
from .e2e_report import (
    ABLATION_HEADERS,
    BOUND_HEADERS,
    HEADERS,
    ablation_rows,
    answers_equal_across,
    bound_rows,
    extras_json,
    plot_latency_vs_rate,
    plot_policies,
    policy_table,
    table_rows,
    write_gantts,
    write_json,
    write_policies_json,
    write_step_gantt,
)
from .remote import measure as remote_call_cost
from .workloads import PAPER, WORKLOADS, workload

log = logging.getLogger("benchmarks.e2e")
WARMUP_QUESTION = "What is a black hole?"
ABLATION = ablation_configs(tuple(PASSES))
DEFAULT_APPS = {"default": "naive_rag,advanced_rag",
                "paper": "naive_rag,advanced_rag,contextual_rag,search_gen"}  # fmt: skip


async def ensure_wiki(store: Any, collection: str) -> None:
    """Ingest the wiki summaries into ``collection`` unless all are there (resumes)."""
    from ayo.engines.corpus import load_wiki
    from ayo.runtime.corpus import ingest_all

    articles = load_wiki()
    have = {c.name: c.documents for c in store.collections()}.get(collection, 0)
    if have >= len(articles):
        log.info("collection %r: %d documents in %s", collection, have, store.data_dir)
        return
    log.info("ingesting %d wiki summaries into %r (%d present; minutes on a CPU)",
             len(articles), collection, have)  # fmt: skip
    summary = await ingest_all(store, collection, [a.to_document() for a in articles])
    log.info("ingested %d documents in %.0f s", summary.documents, summary.seconds)


def build_app(args: argparse.Namespace, policy: str, remote_llms: int = 0) -> Any:
    from ayo.apps import APPS
    from ayo.runtime.app import App

    if args.engines == "fake":
        app = App.fake(args.fake_delay, policy=policy)
    else:
        from ayo.runtime.defaults import load_default_engines

        app = App(policy=policy)
        loaded = load_default_engines(engine_options(args))
        engines: dict[str, Any] = loaded.by_name()
        if remote_llms:  # replicas behind one LLM proxy; the judge shares them as the LLM
            from .e2e_ray import remote_llm

            replicas = [engines["llm"]] + [remote_llm(args) for _ in range(remote_llms)]
            engines["llm"] = engines["judge"] = replicas
        for name, engine in engines.items():
            app.add_engine(name, engine)
        app.closing.append(loaded.close)
    if args.answer_tokens is not None:  # the workload's answer cap: the apps built with it
        for name in APPS:
            app.add_workflow(APPS[name].with_options(answer_tokens=args.answer_tokens))
    return app


async def use_profiles(app: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The engines' measured profiles (as the server's first start: measured and stored in the
    data directory once per machine, model, dtype and LLM threads), with ``--split-min-tokens``
    on top; the fakes keep the constants. Returns what the plans read, for the JSON."""
    from ayo.scheduler import DEFAULT_PROFILES

    profiles: dict[str, Any] = dict(DEFAULT_PROFILES)
    if args.engines == "default":
        from ayo.runtime.corpus import default_data_dir
        from ayo.runtime.profiling import engine_profile_path, ensure_profiles

        data_dir = Path(args.data_dir or default_data_dir())
        llm = app.engines.instances("llm")[0]
        path = engine_profile_path(data_dir, "smollm2-135m-instruct", llm)
        profiles.update(await ensure_profiles(app, path, app.engines.instances("embedder")[0]))
    if args.split_min_tokens is not None:  # the LLM profile the prefill-split pass reads
        profiles["llm"] = replace(profiles["llm"], prefill_split_min_tokens=args.split_min_tokens)
    app.use_profiles(profiles)
    return {name: str(p) for name, p in profiles.items()}


def prefix_cache_reset(app: Any) -> Callable[[], Awaitable[None]]:
    """An async reset that empties every LLM instance's prefix cache, a remote one's in its
    actor; called only while the engines are idle, between queries (see e2e_core)."""
    instances = app.engines.instances("llm")

    async def reset() -> None:
        for inst in instances:
            if isinstance(inst, RemoteEngine):
                await inst.apply(clear_prefix_cache)
            else:
                inst.reset_prefix_cache()

    return reset


def estimate_s(warm_ms: dict[str, float], plan: Plan) -> float:
    """Seconds the measurements should take, from one warm-up latency per app."""
    total = 0.0
    n = len(plan.questions)
    serial_n = plan.serial_n or n
    lats = [warm_ms[name] / 1e3 for name in plan.apps]
    groups = [sum(lats) / len(lats)] if plan.mix else lats
    for lat in groups:
        total += 2 * serial_n * lat
        for mult in plan.rate_multipliers:
            total += 2 * (n / (mult / lat) + lat)
    return total


class StepLog:
    """Records the LLM engine's steps during the highest-rate optimized run (``run_all``'s
    ``on_mode`` hook)."""

    def __init__(self, engine: Any, load_prefix: str) -> None:
        self.engine, self.prefix = engine, load_prefix
        self.steps: list[Any] = []

    def __call__(self, event: str, load: str, mode: str) -> None:
        if mode != MODES[0] or not load.startswith(self.prefix):
            return
        if event == "start":
            self.engine.record_steps(True)
        else:
            self.steps = list(self.engine.record_steps(False))


@dataclass
class Extras:
    """What a run measures besides the table: each serial query's critical-path bound (by
    app) and the pass ablation (by app)."""

    bounds: dict[str, list[Bound]] = field(default_factory=dict)
    ablation: list[AblationResult] = field(default_factory=list)


async def bench(
    args: argparse.Namespace, plan: Plan, policy: str, remote_llms: int = 0
) -> tuple[list[SettingResult], dict[str, Any], StepLog | None, Extras]:
    t_load = time.perf_counter()
    app = build_app(args, policy, remote_llms)
    if args.engines == "default":
        await ensure_wiki(app.engines.instances("index")[0].store, args.collection)
    meta: dict[str, Any] = {"load_s": round(time.perf_counter() - t_load, 1)}
    async with app:
        meta["profiles"] = await use_profiles(app, args)
        warm: dict[str, float] = {}
        warmup = replace(plan, questions=(WARMUP_QUESTION,))
        for name in plan.apps:
            ((_, inputs),) = warmup.queries(app, (name,))
            for optimize in (plan.optimize, False):  # compiles both plans, warms the kernels
                r = await app.run(name, inputs, optimize=optimize)
                warm[name] = max(warm.get(name, 0.0), r.latency_ms)
        expected = estimate_s(warm, plan)
        log.info("warm-up latency %s; expected duration of the measurements ~%.0f s (%.1f min)",
                 {k: f"{v / 1e3:.1f} s" for k, v in warm.items()}, expected, expected / 60)  # fmt: skip
        meta.update(warmup_ms=warm, expected_s=round(expected))
        t0 = time.perf_counter()
        steps = None
        if args.engines == "default" and plan.rate_multipliers and not args.ray:
            top = max(plan.rate_multipliers)
            steps = StepLog(app.engines.instances("llm")[0], f"poisson {top:g}x ")
        reset = prefix_cache_reset(app) if args.engines == "default" else lambda: None
        results = await run_all(app, plan, log.info, reset, steps)
        extras = Extras()
        if not plan.mix:
            for r in results:
                if r.rate_qps is None:
                    queries = plan.queries(app, (r.app,))[: plan.serial_n or len(plan.questions)]
                    extras.bounds[r.app] = serial_bounds(app, r, queries, WORKERS, args.cores)
        if args.ablate:
            for name in plan.apps:
                queries = plan.queries(app, (name,))[: plan.serial_n or len(plan.questions)]
                log.info("ablation of %s: %d queries x %d pass sets", name, len(queries),
                         len(ABLATION))  # fmt: skip
                extras.ablation.append(await run_ablation(app, name, queries, ABLATION, reset))
        meta["measure_s"] = round(time.perf_counter() - t0, 1)
        if args.engines == "default":
            meta["llm_stats"] = str(app.engines.instances("llm")[0].stats())
        if remote_llms:
            meta["remote"] = [await r.health() for r in app.engines.instances("llm")[1:]]
        meta["engine_stats"] = app.engines.stats()
    return results, meta, steps, extras


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.e2e", description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", default=None, help="RetrievalStore folder (default: "
                   "$AYO_DATA_DIR or ~/.cache/ayo); the wiki is ingested when missing")  # fmt: skip
    p.add_argument("--collection", default="wiki")
    p.add_argument("--workload", choices=WORKLOADS, default="default", help="default: the "
                   "apps over the stored wiki collection; paper: each query brings its own "
                   "300-700 passages, answers <= 10 tokens (benchmarks/workloads.py)")  # fmt: skip
    p.add_argument("--apps", default=None, help="comma-separated (default: "
                   f"{DEFAULT_APPS['default']}; with --workload paper: all four)")  # fmt: skip
    p.add_argument("--questions", type=int, default=6, help="fanoutqa dev questions (seeded)")
    p.add_argument("--serial-questions", type=int, default=None,
                   help="how many of them run one at a time (default: all)")  # fmt: skip
    p.add_argument("--rates", default="0.5,1", help="Poisson rates, multiples of the serial "
                   "capacity of the module-by-module mode")  # fmt: skip
    p.add_argument("--max-tokens", type=int, default=None, help="cap on every LLM call "
                   "(default: 32; with --workload paper none: answers <= 10 tokens, the "
                   "expansion and contexts at the apps' own ceilings)")  # fmt: skip
    p.add_argument("--passes", default=",".join(PASSES), help="the passes of the optimized "
                   f"mode (of {', '.join(PASSES)})")  # fmt: skip
    p.add_argument("--ablate", action="store_true", help="also run every app's serial "
                   "queries under each pass alone, all but one and all (a table)")  # fmt: skip
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="cores the "
                   "critical-path bound lets the engines share (default: this machine's)")  # fmt: skip
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--llm-threads", type=int, default=1, help="torch threads of the LLM's "
                   "worker (0: torch's default, all cores)")  # fmt: skip
    p.add_argument("--embedder-threads", type=int, default=1, help="torch threads of the "
                   "embedder's worker, which the reranker uses too (0: torch's default)")  # fmt: skip
    p.add_argument("--split-min-tokens", type=int, default=None, help="the LLM profile's "
                   "prefill_split_min_tokens (a large value turns the prefill split off)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policy", default="critical_path", help="the engines' batching policy, "
                   "which also orders the LLM engine's steps; several, comma-separated, run "
                   f"one after another (of {', '.join(POLICIES)})")  # fmt: skip
    p.add_argument("--mix", action="store_true", help="run the apps together (question i to "
                   "app i mod len(apps)) instead of one app at a time")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("/tmp/ayo-e2e"), help="folder for outputs")
    p.add_argument("--engines", choices=("default", "fake"), default="default",
                   help="embedded engines, or the deterministic fakes (a smoke run)")  # fmt: skip
    p.add_argument("--fake-delay", type=float, default=0.002, help="fake engines' delay (s)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    p.add_argument("--ray", action="store_true", help="1 local LLM vs 1 local + 1 remote "
                   "replica (a Ray actor on a second loopback node; the ray extra), then what "
                   "a remote call adds, same run (see benchmarks/e2e_ray.py)")  # fmt: skip
    args = p.parse_args(argv)
    paper = args.workload == "paper"
    args.apps = args.apps or DEFAULT_APPS[args.workload]
    if args.max_tokens is None and not paper:
        args.max_tokens = 32
    args.answer_tokens = PAPER.answer_tokens if paper else None
    if args.quick:
        args.questions, args.serial_questions = 2, 2
        args.max_tokens = min(args.max_tokens or 8, 8)
    if args.questions < 1 or (args.max_tokens is not None and args.max_tokens < 1):
        p.error("--questions and --max-tokens must be >= 1")
    try:
        chosen = pass_set(x for x in args.passes.split(",") if x)
    except ValueError as exc:
        p.error(f"--passes: {exc}")
    args.optimize = True if chosen == set(PASSES) else chosen
    if args.cores < 1:
        p.error("--cores must be >= 1")
    args.policies = [x for x in args.policy.split(",") if x]
    unknown = [x for x in args.policies if x not in POLICIES]
    if unknown or not args.policies:
        p.error(f"--policy: unknown {unknown}; choose from {', '.join(POLICIES)}")
    if args.llm_threads < 0 or args.embedder_threads < 0:
        p.error("--llm-threads and --embedder-threads must be >= 0 (0: torch's default)")
    if args.ray and (len(args.policies) > 1 or args.engines != "default"):
        p.error("--ray compares LLM replicas of the default engines under one --policy")
    if args.ray and importlib.util.find_spec("ray") is None:
        p.error("--ray needs the ray extra: .venv/bin/pip install -e '.[ray]'")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_benchmark_logging()
    args.out.mkdir(parents=True, exist_ok=True)
    apps = tuple(a for a in args.apps.split(",") if a)
    asked = workload(args.workload, apps, args.questions, args.seed)
    log.info("%s", asked.describe())
    plan = Plan(
        apps=apps,
        questions=asked.questions,
        rate_multipliers=tuple(float(x) for x in args.rates.split(",") if x),
        seed=args.seed,
        serial_n=args.serial_questions,
        mix=args.mix,
        documents=asked.documents,
        optimize=args.optimize,
    )
    where = machine()
    load_before = os.getloadavg()
    log.info("machine: %s; load average %.2f %.2f %.2f", where, *load_before)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    by_policy: dict[str, list[SettingResult]] = {}
    metas: dict[str, Any] = {}
    steps: dict[str, StepLog | None] = {}
    extras: dict[str, Extras] = {}
    # the runs compared: one per policy, or (--ray) one per LLM setup under the one policy
    runs = [(s, args.policies[0], n) for s, n in SETUPS] if args.ray else [
        (p, p, 0) for p in args.policies]  # fmt: skip
    cluster = start_cluster(args) if args.ray else None
    overhead: list[list[object]] = []
    try:
        for label, policy, remote_llms in runs:
            log.info("run %s", label)
            results, metas[label], steps[label], extras[label] = asyncio.run(
                bench(args, plan, policy, remote_llms)
            )
            by_policy[label] = results
            if plan.capacity_qps is None:  # the later runs get the same offered rates
                serial = [r for r in results if r.rate_qps is None]
                plan = replace(
                    plan, capacity_qps={r.app: 1e3 / r.runs[MODES[1]].mean_ms for r in serial}
                )
        if cluster is not None:
            overhead = asyncio.run(remote_call_cost(300))
    finally:
        if cluster is not None:
            import ray

            ray.shutdown()
            cluster.shutdown()
    load_after = os.getloadavg()
    split = "" if args.split_min_tokens is None else f"split min {args.split_min_tokens} tokens, "
    cap = f"max {args.max_tokens} new tokens per call" if args.max_tokens else "no cap per call"
    passes = "" if args.optimize is True else f"optimized = {','.join(sorted(args.optimize))}, "
    settings = (f"engines {args.engines}, policy {args.policy}, {split}{passes}LLM {args.dtype}, {cap}, "
                f"LLM threads {args.llm_threads or 'default'}, embedder threads "
                f"{args.embedder_threads or 'default'}; {asked.describe()} "
                f"(seed {args.seed}){', apps mixed' if args.mix else ''}")  # fmt: skip
    print(f"# {where}")
    print(f"# {settings}; started {started}; load average before {load_before[0]:.2f}, after "
          f"{load_after[0]:.2f} (1 min)")  # fmt: skip
    for policy, results in by_policy.items():
        if len(by_policy) > 1:
            print(f"# {'setup' if args.ray else 'policy'} {policy}")
        print_table(HEADERS, table_rows([x for r in results for x in r.per_app()]))
        found = extras[policy]
        if found.bounds:
            print(f"# critical-path bound of the serial queries (mean over them; each from its "
                  f"module-by-module spans, dependencies after pruning, {args.cores} cores)")  # fmt: skip
            print_table(BOUND_HEADERS, bound_rows(results, found.bounds))
        if found.ablation:
            print("# pass ablation: the serial queries under each pass set, one at a time")
            print_table(ABLATION_HEADERS, ablation_rows(found.ablation))
    title = f"{where}\n{settings}"
    written = [args.out / "e2e.json", args.out / "latency_vs_rate.png"]
    meta = {"machine": where, "settings": settings, "started": started,
            "argv": sys.argv[1:] if argv is None else argv, "loadavg_before": load_before,
            "loadavg_after": load_after, "questions": list(plan.questions),
            "extras": {k: extras_json(v) for k, v in extras.items()}}  # fmt: skip
    if len(by_policy) == 1:
        ((policy, results),) = by_policy.items()
        write_json(written[0], {**meta, **metas[policy]}, results)
        plot_latency_vs_rate(written[1], results, title)
        written += write_gantts(args.out, results)
    else:
        if args.ray:
            print("# LLM setups side by side: mean / p99 s and throughput q/s, optimized then "
                  "module by module")  # fmt: skip
            print_table(*policy_table(by_policy, throughput=True))
            for label in by_policy:
                served = {k: v["items"] for k, v in metas[label]["engine_stats"].items()
                          if k.split("#")[0] in ("llm", "judge")}  # fmt: skip
                print(f"# {label}: prefills per LLM instance {served}")
        else:
            print("# policies side by side: mean / p99 s, optimized then module by module")
            print_table(*policy_table(by_policy))
        same, total = answers_equal_across(by_policy)
        what = "LLM setup" if args.ray else "policy"
        print(f"# answers equal across every {what}, load and mode: {same}/{total} questions")
        write_policies_json(written[0], {**meta, "runs": metas}, by_policy)
        plot_policies(written[1], by_policy, title)
    for policy, log_ in steps.items():
        if log_ is not None and log_.steps:
            path = args.out / f"llm_steps_{policy}.png"
            top = [r for r in by_policy[policy] if r.rate_qps is not None][-1]
            write_step_gantt(path, log_.steps, top.runs[MODES[0]],
                             f"LLM steps, policy {policy}, {top.app} {top.load}, optimized")  # fmt: skip
            written.append(path)
    if overhead:
        print("# what a remote call adds (benchmarks.remote: fake engines, the embedder in a Ray actor on the "
              "second node; median of 300 calls)")  # fmt: skip
        print_table(["what", "in process µs", "remote µs", "remote adds µs"], overhead)
    print("# wrote " + ", ".join(str(w) for w in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
