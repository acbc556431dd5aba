"""Batching policies compared on simulated engines, and the runtime's dispatch overhead.

    python -m benchmarks.scheduler [--queries 200] [--loads 0.5,0.8,0.95] [--apps ...]
    python -m benchmarks.scheduler --overhead [--inflight 1000] [--rounds 3] [--no-real]
    python -m benchmarks.scheduler --profiles paper-gpu|default|measured --workload paper|default
        [--queries 8] [--ablate]

The last: optimized vs module by module per app in the paper's setting (``sim_paper.py``).

Policies: each app runs ``--queries`` queries arriving as a seeded Poisson process at several
rates, under ``fcfs``, ``depth`` and ``critical_path`` (same arrivals for all three), on engines
whose latency follows their profile (``ayo.scheduler.sim.simulation``) on a virtual clock: latencies
are exact and the run takes only the CPU time of the bookkeeping. Rates are fractions
(``--loads``) of the app's capacity, measured first as the throughput of a burst of queries.

Overhead: ``--inflight`` queries of naive_rag kept in flight (closed loop, ``--rounds`` queries
per slot) on engines that answer instantly, on a real event loop (asyncio's and uvloop's): wall
time per primitive executed (counted from the traces) for the bare reference executor (no engine
schedulers) and for the runtime (engine schedulers, batching proxies, traces, metrics) under
each policy; beside them, the primitives' own work (their handlers called one after another on
the same engines, no runtime), which every runtime row includes.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import platform
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ayo.engines.base import LocalEngine
from ayo.engines.llm.outputs import DecodePiece
from ayo.runtime.app import App
from ayo.runtime.engine_set import SchedulerConfig
from ayo.scheduler import DEFAULT_PROFILES, Doc, EngineProfile, GraphRun, LatencyModel, PlanCosts
from ayo.scheduler.batching.engine_scheduler import EngineScheduler
from ayo.scheduler.batching.policies import POLICIES, BatchLimits, PendingRequest
from ayo.scheduler.ir.graph import INPUT_ID, OUTPUT_ID
from ayo.scheduler.runtime.handlers import HANDLERS, QueryContext
from ayo.scheduler.runtime.serving_gc import configure_gc_for_serving, restore_gc
from ayo.scheduler.sim.fakes import PieceStream
from ayo.scheduler.sim.simulation import SimLLM, run_virtual, sim_engines

from .common import machine
from .sim_paper import PROFILE_SETS, SIM_WORKLOADS, speedup_report

log = logging.getLogger(__name__)

# A GPU-like LLM (a decode step costs 8 ms plus 0.25 ms per running sequence, prefill tokens
# 0.05 ms each) beside CPU retrieval engines (embedder 1.5 ms and cross-encoder 1 ms per item,
# about what MiniLM-sized models take on this machine class).
_LLM = EngineProfile(efficient_batch=8, latency=LatencyModel(8.0, 0.25, 0.05))
SIM_PROFILES: dict[str, EngineProfile] = {
    **DEFAULT_PROFILES,
    "llm": _LLM,
    "judge": _LLM,
    "embedder": EngineProfile(efficient_batch=16, latency=LatencyModel(2.0, 1.5)),
    "reranker": EngineProfile(efficient_batch=32, latency=LatencyModel(3.0, 1.0)),
}
APPS = ("naive_rag", "advanced_rag", "search_gen", "contextual_rag", "mixed")
WORDS = ["rivers", "stars", "bread", "engines", "music", "forests", "glass", "trains"]


def query_inputs(app: str, i: int) -> tuple[str, dict[str, Any]]:
    """Query ``i`` of workload ``app`` ("mixed": the four apps drawn at random)."""
    rng = random.Random(i)
    if app == "mixed":
        app = rng.choice(APPS[:4])
    question = " ".join(rng.choice(WORDS) for _ in range(6)) + "?"
    if app in ("advanced_rag", "contextual_rag"):
        docs = [" ".join(rng.choice(WORDS) for _ in range(120)) for _ in range(4)]
        return app, {"question": question, "documents": docs}
    return app, {"question": question}


def sim_config(kind: str, policy: str) -> SchedulerConfig:
    """The LLM runs at most 16 decodes at once (its KV cache; each step fills its own token
    budget, in the policy's order); the other engines compute one batch at a time."""
    if kind == "llm":
        return SchedulerConfig(policy, max_running=16)
    return SchedulerConfig(policy, BatchLimits(max_items=32))


async def simulate(app_name: str, policy: str, arrivals: Sequence[float]) -> dict[str, float]:
    """Run one query per arrival time (virtual seconds); latency statistics in ms."""
    app = App(profiles=SIM_PROFILES, policy=policy)
    engines = sim_engines(SIM_PROFILES)
    for name, engine in engines.items():
        app.add_engine(name, engine, config=sim_config(engine.kind, policy))
    loop = asyncio.get_running_loop()
    async with app:
        t0 = loop.time()

        async def one(i: int, at: float) -> float:
            await asyncio.sleep(max(0.0, t0 + at - loop.time()))
            return (await app.run(*query_inputs(app_name, i))).latency_ms

        latencies = await asyncio.gather(*(one(i, at) for i, at in enumerate(arrivals)))
        makespan = loop.time() - t0
    lat = sorted(latencies)
    return {
        "mean": statistics.fmean(lat),
        "p50": lat[len(lat) // 2],
        "p99": lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))],
        "throughput": len(lat) / makespan,
        "llm_batch": _mean_step(engines["llm"]),
    }


def poisson(rate: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    return out


def policy_table(apps: Sequence[str], queries: int, loads: Sequence[float], seed: int) -> None:
    print(f"machine: {machine()}, Python {platform.python_version()}")
    capacity = {}
    for app in apps:
        capacity[app] = run_virtual(simulate(app, "fcfs", [0.0] * queries))["throughput"]
        print(f"{app}: capacity {capacity[app]:.2f} queries/s ({queries} at once, fcfs)")
    print(
        f"{'app':<15} {'qps':>6} {'load':>5} {'policy':<14} {'mean ms':>9} {'p50 ms':>9} "
        f"{'p99 ms':>9} {'tput qps':>9} {'llm batch':>9}"
    )
    for app in apps:
        for load in loads:
            rate = capacity[app] * load
            arrivals = poisson(rate, queries, seed)
            for policy in POLICIES:
                r = run_virtual(simulate(app, policy, arrivals))
                print(
                    f"{app:<15} {rate:>6.1f} {load:>5.2f} {policy:<14} {r['mean']:>9.1f} "
                    f"{r['p50']:>9.1f} {r['p99']:>9.1f} {r['throughput']:>9.2f} "
                    f"{r['llm_batch']:>9.2f}"
                )


# ---- dispatch overhead ------------------------------------------------------------------------


def _mean_step(llm: SimLLM) -> float:
    """Sequences per step of the simulated LLM."""
    return llm.step_items / llm.steps if llm.steps else 0.0


class _NullTokenizer:
    def encode(self, text: str) -> list[int]:
        return [1, 2, 3]

    def encode_parts(self, parts: Any) -> list[int]:
        return [1, 2, 3]

    def decode(self, ids: list[int]) -> str:
        return ""

    def render_chat(self, messages: list[dict[str, str]]) -> str | None:
        return None

    def render_chat_parts(self, messages: Any, add_generation_prompt: bool = True,
                          tools: Any = None) -> None:  # fmt: skip
        return None

    renders_tools = False


async def _yes() -> Any:
    yield DecodePiece(0, "yes", 0)


class NullLLM(LocalEngine):
    """Answers instantly: every engine call costs only its Python call."""

    kind = "llm"
    tokenizer = _NullTokenizer()

    def set_step_order(self, order: Any) -> None:
        return None

    def kv_usage(self) -> float:
        return 0.0

    async def open(self) -> object:
        return object()

    async def prefill(self, seq: object, tokens: list[int], *, info: Any = None) -> None:
        return None

    def prefill_when_idle(self, seq: object, tokens: list[int], *, info: Any = None) -> None:
        return None

    def decode(self, seq: object, params: Any, *, info: Any = None) -> PieceStream:
        return PieceStream(_yes(), params)

    async def score(self, seq: object, candidates: list[str], *, info: Any = None) -> list[float]:
        return [0.0] * len(candidates)

    async def close(self, seq: object) -> None:
        return None


class NullEmbedder(LocalEngine):
    kind = "embedder"

    async def embed(self, texts: list[str], *, info: Any = None) -> list[list[float]]:
        return [[0.0]] * len(texts)


class NullIndex(LocalEngine):
    kind = "index"
    doc = Doc("d", "text")

    async def search(
        self, collection: str, vectors: Any, k: int, *, info: Any = None
    ) -> list[list[Doc]]:
        return [[self.doc]] * len(vectors)

    async def ingest(
        self, collection: str, docs: list[Doc], vectors: Any, *, info: Any = None
    ) -> None:
        return None

    async def drop(self, collection: str) -> None:
        return None


def _null_engines() -> dict[str, Any]:
    return {"llm": NullLLM(), "embedder": NullEmbedder(), "index": NullIndex()}


def _null_app(policy: str) -> App:
    app = App(policy=policy)
    for name, engine in _null_engines().items():
        app.add_engine(name, engine)
    return app


async def _closed_loop(inflight: int, rounds: int, one: Any) -> None:
    """``inflight`` workers each run ``rounds`` queries one after another, so ``inflight``
    queries are in flight the whole time (steady state, garbage collections included)."""

    async def worker() -> None:
        for _ in range(rounds):
            await one()

    await asyncio.gather(*(worker() for _ in range(inflight)))


async def _overhead_once(
    inflight: int, rounds: int, policy: str | None, gc_mode: str = "default"
) -> tuple[float, float]:
    """(wall, CPU) seconds per primitive executed, for naive_rag queries on instant engines:
    through the runtime (``policy``) or, with ``policy=None``, the bare reference executor.
    ``gc_mode``: ``default``, ``freeze`` (``gc.freeze()`` after startup) or ``serving``
    (:func:`configure_gc_for_serving`: freeze and a larger young-generation threshold)."""
    app = _null_app(policy or "fcfs")
    inputs = {"question": "why do stars shine"}
    counted = [0]
    async with app:
        plan = app.plan("naive_rag", inputs)
        costs = PlanCosts.of(plan, {})  # once per plan, as the App does
        raw = _null_engines()
        first = await app.run("naive_rag", inputs)  # warm caches
        per_query = len(plan.nodes) - 2
        if len(first.trace.spans) != per_query:
            raise RuntimeError(f"expected {per_query} primitives, traced {first.trace.spans}")

        async def one() -> None:
            if policy is None:
                await GraphRun(plan, inputs, raw, costs=costs).run()
                counted[0] += per_query
            else:
                await app.run("naive_rag", inputs)
                counted[0] += per_query

        gc.collect()
        if gc_mode == "freeze":
            gc.freeze()
        elif gc_mode == "serving":
            configure_gc_for_serving()
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            await _closed_loop(inflight, rounds, one)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            restore_gc()
    return wall / counted[0], cpu / counted[0]


async def _direct_once(inflight: int, rounds: int) -> tuple[float, float]:
    """(wall, CPU) seconds per primitive when naive_rag's handlers are called one after another
    in topological order, straight on the instant engines: no readiness tracking, no engine
    schedulers or batching, no traces or metrics. The primitives' own work (reading their
    inputs, rendering prompts, building engine calls), which every runtime row includes."""
    inputs = {"question": "why do stars shine"}
    app = _null_app("fcfs")
    async with app:
        plan = app.plan("naive_rag", inputs)
        expected = (await app.run("naive_rag", inputs)).outputs
    engines = _null_engines()
    order = [plan.node(n) for n in plan.topo_order if n not in (INPUT_ID, OUTPUT_ID)]
    sources = {
        n.id: [(e.dst_port, e.src, e.src_port) for e in plan.in_edges(n.id)]
        for n in [*order, plan.node(OUTPUT_ID)]
    }
    counted = [0]

    async def one() -> dict[str, Any]:
        ctx = QueryContext("q", engines)
        values: dict[tuple[str, str], Any] = {(INPUT_ID, k): v for k, v in inputs.items()}
        for node in order:
            data = {port: values[src, src_port] for port, src, src_port in sources[node.id]}
            for port, value in (await HANDLERS[node.op](node, data, ctx, None)).items():
                values[node.id, port] = value
        counted[0] += len(order)
        return {port: values[src, src_port] for port, src, src_port in sources[OUTPUT_ID]}

    if await one() != expected:  # the same primitives, the same answer
        raise RuntimeError(f"direct calls gave another answer than the runtime: {expected}")
    counted[0] = 0
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    await _closed_loop(inflight, rounds, one)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall / counted[0], cpu / counted[0]


async def _floor_once(n: int) -> tuple[float, float]:
    """Seconds per task that awaits one future resolved by a callback: asyncio's floor for a
    primitive that waits on an engine."""
    loop = asyncio.get_running_loop()

    async def one() -> None:
        fut = loop.create_future()
        loop.call_soon(fut.set_result, None)
        await fut

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one() for _ in range(n)))
    return (time.perf_counter() - wall) / n, (time.process_time() - cpu) / n


class _EchoRunner:
    async def run_batch(self, payloads: list[Any]) -> list[Any]:
        return payloads


async def _engine_scheduler_once(n: int, policy: str) -> tuple[float, float]:
    """Seconds per request through one engine scheduler, ``n`` requests in flight."""
    sched = EngineScheduler(_EchoRunner(), "e", policy=policy, max_queue=n + 1)
    sched.start()
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(sched.submit(PendingRequest(i, "n", i)) for i in range(n)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await sched.stop()
    return wall / n, cpu / n


def overhead_report(inflight: int, rounds: int, repeats: int, real: bool) -> None:
    """Per-primitive dispatch cost: the median over ``repeats`` runs of wall time / primitives
    executed, on asyncio's loop and on uvloop (when installed); CPU time beside it."""
    runners: list[tuple[str, Any]] = [("asyncio", asyncio.run)]
    try:
        import uvloop

        runners.append(("uvloop", uvloop.run))
    except ImportError:
        log.warning("uvloop is not installed: asyncio only")
    load = os.getloadavg()[0]
    print(f"machine: {machine()}, Python {platform.python_version()}")
    print(
        f"microseconds per primitive: wall time / primitives executed, median of {repeats} "
        f"runs [fastest run in brackets]; rows measured in turn, one run of each per round, "
        f"so a slow spell of the machine hits every row alike; {inflight} queries in flight, "
        f"{rounds} rounds; engines answer at once; load average {load:.2f}"
        f"{' (loaded)' if load > 1 else ''}"
    )
    rows: list[tuple[str, Any]] = [
        ("asyncio floor: a task awaiting a future", lambda: _floor_once(inflight)),
        ("primitives' own work: handlers called", lambda: _direct_once(inflight, rounds)),
        *(
            (f"engine scheduler alone, {p}", lambda p=p: _engine_scheduler_once(inflight, p))
            for p in POLICIES
        ),
        ("graph scheduler alone, engines called", lambda: _overhead_once(inflight, rounds, None)),
        *(
            (f"runtime: App, {p} (naive_rag)", lambda p=p: _overhead_once(inflight, rounds, p))
            for p in POLICIES
        ),
        (
            "runtime, critical_path, gc.freeze()",
            lambda: _overhead_once(inflight, rounds, "critical_path", "freeze"),
        ),
        (
            "runtime, critical_path, serving gc",
            lambda: _overhead_once(inflight, rounds, "critical_path", "serving"),
        ),
    ]
    walls: dict[tuple[int, int], list[float]] = {}
    cpus: dict[tuple[int, int], list[float]] = {}
    for _ in range(repeats):
        for r, (_label, make) in enumerate(rows):
            for k, (_, runner) in enumerate(runners):
                wall, cpu = runner(make())
                walls.setdefault((r, k), []).append(wall * 1e6)
                cpus.setdefault((r, k), []).append(cpu * 1e6)
    print(f"{'what':<42} " + " ".join(f"{name:>16}" for name, _ in runners))
    for r, (label, _) in enumerate(rows):
        cells = [
            f"{statistics.median(walls[r, k]):>7.1f} [{min(walls[r, k]):>6.1f}]"
            for k in range(len(runners))
        ]
        print(f"{label:<42} " + " ".join(f"{c:>16}" for c in cells))
    cpu_share = statistics.median(
        sum(cpus[key]) / sum(walls[key]) for key in walls if sum(walls[key]) > 0
    )
    print(f"(CPU time / wall time, median over rows: {cpu_share:.2f}: the loop never waits)")
    own, served = 1, len(rows) - 1  # the primitives' own work; the serving-gc runtime row
    dispatch = ", ".join(
        f"{name} {statistics.median(walls[served, k]) - statistics.median(walls[own, k]):.1f}"
        for k, (name, _) in enumerate(runners)
    )
    print(f"(the runtime's own share of the last row: minus the primitives' own work: {dispatch})")
    print("(naive_rag: 7 primitives a query, 5 on engines. gc.freeze(): the startup heap moved")
    print(" out of the cyclic GC's reach; serving gc: that and a young-generation threshold of")
    print(
        " 50000, ayo.scheduler.runtime.serving_gc.configure_gc_for_serving(), for a server to call)"
    )
    if real:
        real_engine_share()


DOCS = [
    "Stars shine because nuclear fusion in their cores turns hydrogen into helium and "
    "releases energy that leaves the surface as light.",
    "Rivers carry rain water downhill to the sea, cutting valleys on the way.",
]


def real_engine_share() -> None:
    """advanced_rag on the embedded engines: end-to-end latency and the event-loop thread's CPU
    time (the runtime, plus tokenization and engine glue, which run there too)."""
    import tempfile

    try:
        app = App.default(data_dir=tempfile.mkdtemp(prefix="ayo-bench-"))
    except RuntimeError as exc:
        print(f"real engines: not available ({exc})")
        return

    async def main() -> None:
        inputs = {"question": "Why do stars shine?", "documents": DOCS}
        async with app:
            await app.run("naive_rag", inputs)  # warm-up: first calls initialize the models
            cpu0 = time.thread_time()
            result = await app.run("advanced_rag", inputs)
            cpu = time.thread_time() - cpu0
        prims = len({s.node_id for s in result.trace.spans})
        print(
            f"advanced_rag on the embedded engines: {result.latency_ms:.0f} ms end to end, "
            f"{prims} primitives; event-loop thread CPU {cpu * 1e3:.1f} ms = "
            f"{100 * cpu * 1e3 / result.latency_ms:.2f}% of the latency (upper bound: includes "
            "tokenization and engine submission)"
        )

    asyncio.run(main())


def _seconds(result: Any) -> float:
    return result[0] if isinstance(result, tuple) else result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--overhead", action="store_true", help="measure dispatch overhead")
    parser.add_argument("--inflight", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="--overhead: queries per worker")
    parser.add_argument("--repeats", type=int, default=5, help="--overhead: runs per cell")
    parser.add_argument(
        "--no-real", action="store_true", help="--overhead: skip the real-engine share"
    )
    parser.add_argument(
        "--single",
        type=int,
        metavar="ROUNDS",
        help="one overhead run of ROUNDS rounds (critical_path, serving gc), for instruction "
        "counts: valgrind --tool=callgrind ... --single 3 minus --single 1, over inflight*2 queries",
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--loads", default="0.7,1.0,1.3")
    parser.add_argument("--apps", default=",".join(APPS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profiles", choices=PROFILE_SETS, default=None, help="optimized vs "
                        "module by module under these engine profiles (see sim_paper.py)")  # fmt: skip
    parser.add_argument("--workload", choices=SIM_WORKLOADS, default=None, help="with "
                        "--profiles: the paper's document QA shape or the apps' defaults")  # fmt: skip
    parser.add_argument("--ablate", action="store_true", help="with --profiles: each pass "
                        "alone, all but one, all")  # fmt: skip
    parser.add_argument("--data-dir", type=Path, default=None, help="--profiles measured: "
                        "where the real engines stored their profile")  # fmt: skip
    args = parser.parse_args(argv)
    if args.profiles or args.workload or args.ablate:
        apps = [a for a in args.apps.split(",") if a and a != "mixed"]
        queries = 8 if args.queries == parser.get_default("queries") else args.queries
        speedup_report(args.profiles or "paper-gpu", args.workload or "paper", apps, queries,
                       args.seed, args.ablate, args.data_dir)  # fmt: skip
        return
    if args.single is not None:
        wall, _ = asyncio.run(
            _overhead_once(args.inflight, args.single, "critical_path", "serving")
        )
        print(f"{wall * 1e6:.1f} us per primitive")
        return
    if args.overhead:
        overhead_report(args.inflight, args.rounds, args.repeats, not args.no_real)
        return
    start = time.perf_counter()
    loads = [float(x) for x in args.loads.split(",")]
    policy_table(args.apps.split(","), args.queries, loads, args.seed)
    print(f"(simulated on a virtual clock; {time.perf_counter() - start:.1f} s of CPU)")


if __name__ == "__main__":
    main()
