"""The measurement loop of ``python -m benchmarks.e2e``, independent of which engines run.

One :class:`~ayo.runtime.app.App` (the same engines for both modes) runs every workload twice: with
the optimized plan (Ayo's passes) and with ``optimize=False`` (module by module).

- ``serial``: one query at a time over the questions; the two modes alternate per question and
  so does which of them goes first (a question's prompts warm the prefix cache for whichever
  mode runs second, so neither mode always gets that benefit).
- ``poisson``: queries arrive as a seeded Poisson process at a given rate (the same arrival
  times for both modes); the modes run one after the other, their order alternating per rate.

``run_ablation``: each query once per pass set (none, each pass alone, all but one, all), one at
a time, the sets rotating per query. ``serial_bounds``: each serial query's critical-path bound
(``bound.py``) from its module-by-module run.

``reset`` (optional) runs before every serial query and every Poisson run of a mode, while the
engines are idle: the real benchmark empties the LLM's prefix cache there, so no query finds
its own prompt cached by an earlier run of the same question (a module-by-module prompt would
match whole, a split one only up to its split, which would favour one mode).

With ``Plan.mix`` the apps run together: question ``i`` goes to app ``i mod len(apps)``, the
serial capacity is the whole mix's, and the results give each app's share (``per_app``).
"""

from __future__ import annotations

import asyncio
import inspect
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MODES = ("optimized", "module-by-module")
Optimize = bool | frozenset[str]  # what a mode runs: all passes, none, or those named


@dataclass
class ModeRun:
    """One mode's queries of one setting: latencies (ms), answers, traces and wall time, in
    question order."""

    mode: str
    latencies_ms: list[float] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    traces: list[Any] = field(default_factory=list)
    apps: list[str] = field(default_factory=list)  # each query's app

    def only(self, app: str) -> ModeRun:
        """The queries of ``app`` (the run's wall time kept)."""
        keep = [i for i, a in enumerate(self.apps) if a == app]
        pick = lambda xs: [xs[i] for i in keep if i < len(xs)]  # noqa: E731
        return ModeRun(self.mode, pick(self.latencies_ms), pick(self.answers), self.wall_s,
                       pick(self.traces), pick(self.apps))  # fmt: skip

    @property
    def n(self) -> int:
        return len(self.latencies_ms)

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.latencies_ms)

    @property
    def p50_ms(self) -> float:
        return percentile(self.latencies_ms, 50)

    @property
    def p99_ms(self) -> float:
        return percentile(self.latencies_ms, 99)

    @property
    def throughput_qps(self) -> float:
        return self.n / self.wall_s if self.wall_s > 0 else 0.0

    def summary(self) -> dict[str, float | int | str]:
        return {
            "mode": self.mode,
            "n": self.n,
            "mean_ms": round(self.mean_ms, 1),
            "p50_ms": round(self.p50_ms, 1),
            "p99_ms": round(self.p99_ms, 1),
            "throughput_qps": round(self.throughput_qps, 4),
            "wall_s": round(self.wall_s, 2),
        }


@dataclass
class SettingResult:
    """Both modes of one (app, load) setting. ``rate_qps`` is None for the serial setting."""

    app: str
    load: str
    rate_qps: float | None
    runs: dict[str, ModeRun]

    @property
    def speedup(self) -> float:
        """Mean latency of module-by-module over optimized (> 1: optimized is faster)."""
        return self.runs[MODES[1]].mean_ms / self.runs[MODES[0]].mean_ms

    @property
    def speedup_p99(self) -> float:
        return self.runs[MODES[1]].p99_ms / self.runs[MODES[0]].p99_ms

    def per_app(self) -> list[SettingResult]:
        """One result per app of a mixed setting (this one alone when it has one app)."""
        apps = list(dict.fromkeys(self.runs[MODES[0]].apps))
        if len(apps) <= 1:
            return [self]
        return [
            SettingResult(a, self.load, self.rate_qps, {m: r.only(a) for m, r in self.runs.items()})
            for a in apps
        ]

    @property
    def equal_answers(self) -> int:
        a, b = (self.runs[m].answers for m in MODES)
        return sum(x == y for x, y in zip(a, b))

    def differing(self) -> list[int]:
        a, b = (self.runs[m].answers for m in MODES)
        return [i for i, (x, y) in enumerate(zip(a, b)) if x != y]

    def to_json(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "load": self.load,
            "rate_qps": self.rate_qps,
            "speedup_mean": round(self.speedup, 4),
            "speedup_p99": round(self.speedup_p99, 4),
            "equal_answers": self.equal_answers,
            "total": self.runs[MODES[0]].n,
            "differing": self.differing(),
            "modes": {m: r.summary() for m, r in self.runs.items()},
            "answers": {m: r.answers for m, r in self.runs.items()},
        }


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in [0, 100]) of a non-empty sample."""
    if not values:
        raise ValueError("percentile of an empty sample")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def poisson_arrivals(n: int, rate_qps: float, seed: int) -> list[float]:
    """``n`` arrival times (s from 0; the first at 0) with exponential gaps of mean 1/rate."""
    if rate_qps <= 0:
        raise ValueError(f"rate must be > 0 queries/s, got {rate_qps}")
    rng = random.Random(seed)
    times, t = [], 0.0
    for _ in range(n):
        times.append(t)
        t += rng.expovariate(rate_qps)
    return times


def _answer(outputs: dict[str, Any]) -> str:
    return str(outputs.get("answer", outputs))


Reset = Callable[[], Awaitable[None] | None]  # sync, or async (a remote engine's cache)


def _no_reset() -> None:
    return None


async def _reset(reset: Reset) -> None:
    done = reset()
    if inspect.isawaitable(done):
        await done


Query = tuple[str, dict[str, Any]]  # (app, inputs)


def _record(run: ModeRun, app_name: str, result: Any) -> None:
    run.latencies_ms.append(result.latency_ms)
    run.answers.append(_answer(result.outputs))
    run.traces.append(result.trace)
    run.apps.append(app_name)


async def run_serial(
    app: Any,
    label: str,
    queries: Sequence[Query],
    reset: Reset = _no_reset,
    optimize: Optimize = True,
) -> SettingResult:
    """Each query once per mode, one at a time, modes alternating (``optimize``: what the
    optimized mode runs)."""
    runs = {m: ModeRun(m) for m in MODES}
    for i, (name, inputs) in enumerate(queries):
        order = MODES if i % 2 == 0 else MODES[::-1]
        for mode in order:
            await _reset(reset)
            t0 = time.perf_counter()
            result = await app.run(name, inputs, optimize=optimize if mode == MODES[0] else False)
            runs[mode].wall_s += time.perf_counter() - t0
            _record(runs[mode], name, result)
    return SettingResult(label, "serial", None, runs)


async def _poisson_mode(
    app: Any, queries: Sequence[Query], arrivals: Sequence[float], mode: str, optimize: Optimize
) -> ModeRun:
    run = ModeRun(mode)
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def one(query: Query, at: float) -> Any:
        await asyncio.sleep(max(0.0, t0 + at - loop.time()))  # the arrival, not a poll
        return await app.run(query[0], query[1], optimize=optimize if mode == MODES[0] else False)

    done = await asyncio.gather(*(one(q, a) for q, a in zip(queries, arrivals)))
    run.wall_s = loop.time() - t0
    for (name, _), result in zip(queries, done):
        _record(run, name, result)
    return run


async def run_poisson(
    app: Any,
    label: str,
    queries: Sequence[Query],
    rate_qps: float,
    seed: int,
    optimized_first: bool = True,
    load: str | None = None,
    reset: Reset = _no_reset,
    on_mode: Callable[[str, str], None] | None = None,
    optimize: Optimize = True,
) -> SettingResult:
    """The queries arriving at ``rate_qps`` (Poisson, seeded), once per mode. ``on_mode`` is
    called with ("start" | "end", mode) around each mode's run (the step log hooks on it)."""
    arrivals = poisson_arrivals(len(queries), rate_qps, seed)
    runs: dict[str, ModeRun] = {}
    for mode in MODES if optimized_first else MODES[::-1]:
        await _reset(reset)
        if on_mode is not None:
            on_mode("start", mode)
        runs[mode] = await _poisson_mode(app, queries, arrivals, mode, optimize)
        if on_mode is not None:
            on_mode("end", mode)
    return SettingResult(label, load or f"poisson {rate_qps:.3g}/s", rate_qps, runs)


@dataclass(frozen=True)
class Plan:
    """What to run: apps, questions (first ``serial_n`` serially), rates as multiples of the
    serial capacity of the module-by-module mode (1 / its mean serial latency), or of
    ``capacity_qps`` when given (to offer several runs the same rates). ``mix``: the apps run
    together (see the module doc). ``documents``: per question, the documents given to apps
    bring per query, by app (an app absent brings none). ``optimize``: what the optimized mode
    runs (all passes, or the names of some)."""

    apps: tuple[str, ...]
    questions: tuple[str, ...]
    rate_multipliers: tuple[float, ...]
    seed: int = 0
    serial_n: int | None = None
    mix: bool = False
    capacity_qps: Mapping[str, float] | None = None  # by label: the app, or "mix"
    documents: Mapping[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    optimize: Optimize = True

    def queries(self, app: Any, names: Sequence[str]) -> list[Query]:
        """Question ``i`` for app ``names[i mod len(names)]``, with its documents."""
        out: list[Query] = []
        for i, question in enumerate(self.questions):
            name = names[i % len(names)]
            inputs: dict[str, Any] = {"question": question}
            docs = self.documents.get(name)
            if docs:
                inputs["documents"] = list(docs[i % len(docs)])
            elif "documents" in getattr(app.workflow(name), "required", ()):
                raise ValueError(f"app {name!r} needs documents: give Plan.documents[{name!r}]")
            out.append((name, inputs))
        return out


async def run_all(
    app: Any,
    plan: Plan,
    log: Callable[[str], None] = lambda _: None,
    reset: Reset = _no_reset,
    on_mode: Callable[[str, str, str], None] | None = None,
) -> list[SettingResult]:
    """Serial, then Poisson at each rate, for every app of ``plan`` (or for the mix).
    ``on_mode(event, load, mode)`` is called around each Poisson run of a mode."""
    results: list[SettingResult] = []
    groups = [("mix", plan.apps)] if plan.mix else [(a, (a,)) for a in plan.apps]
    for label, names in groups:
        queries = plan.queries(app, names)
        serial = await run_serial(
            app, label, queries[: plan.serial_n or len(queries)], reset, plan.optimize
        )
        results.append(serial)
        log(_line(serial))
        given = (plan.capacity_qps or {}).get(label)
        capacity = given or 1e3 / serial.runs[MODES[1]].mean_ms
        for j, mult in enumerate(plan.rate_multipliers):
            load = f"poisson {mult:g}x ({mult * capacity:.3g}/s)"
            hook = None if on_mode is None else (lambda ev, m, load=load: on_mode(ev, load, m))
            res = await run_poisson(
                app, label, queries, mult * capacity, plan.seed + j, j % 2 == 0, load, reset, hook,
                plan.optimize,
            )  # fmt: skip
            results.append(res)
            log(_line(res))
    return results


def _line(r: SettingResult) -> str:
    o, u = (r.runs[m] for m in MODES)
    return (
        f"{r.app} {r.load}: optimized mean {o.mean_ms:.0f} ms, module-by-module {u.mean_ms:.0f}"
        f" ms, speedup {r.speedup:.2f}x, equal answers {r.equal_answers}/{o.n}"
    )


def ablation_configs(passes: Sequence[str]) -> list[tuple[str, Optimize]]:
    """The pass sets of an ablation over ``passes``: none (module by module), each alone, all
    but each one, all."""
    names = list(passes)
    out: list[tuple[str, Optimize]] = [("none (module by module)", False)]
    out += [(f"{n} only", frozenset({n})) for n in names]
    out += [(f"all but {n}", frozenset(names) - {n}) for n in names]
    out.append(("all", True))
    return out


@dataclass
class AblationResult:
    """One app's queries run once per pass set (serial), in ``ablation_configs`` order."""

    app: str
    runs: dict[str, ModeRun]

    @property
    def baseline(self) -> ModeRun:
        return next(iter(self.runs.values()))

    def speedup(self, label: str) -> float:
        return self.baseline.mean_ms / self.runs[label].mean_ms

    def equal_answers(self, label: str) -> int:
        return sum(a == b for a, b in zip(self.runs[label].answers, self.baseline.answers))


async def run_ablation(
    app: Any,
    label: str,
    queries: Sequence[Query],
    configs: Sequence[tuple[str, Optimize]],
    reset: Reset = _no_reset,
) -> AblationResult:
    """Each query once per pass set, one at a time; query ``i`` starts at set ``i mod n`` so
    that no set always runs first (a question's prompts warm what stays cached)."""
    runs = {name: ModeRun(name) for name, _ in configs}
    for i, (name, inputs) in enumerate(queries):
        for j in range(len(configs)):
            tag, optimize = configs[(i + j) % len(configs)]
            await _reset(reset)
            t0 = time.perf_counter()
            result = await app.run(name, inputs, optimize=optimize)
            runs[tag].wall_s += time.perf_counter() - t0
            _record(runs[tag], name, result)
    return AblationResult(label, runs)


def serial_bounds(
    app: Any, result: SettingResult, queries: Sequence[Query], workers: Mapping[str, str],
    cores: int,
) -> list[Any]:  # fmt: skip
    """The critical-path bound (``bound.Bound``) of each query of a serial setting, from its
    module-by-module run (``bound.query_bound``)."""
    from .bound import query_bound

    traces = result.runs[MODES[1]].traces
    return [
        query_bound(app, name, inputs, trace.spans, workers, cores)
        for (name, inputs), trace in zip(queries, traces)
    ]
