"""Plan compile time per built-in app: cold (build + decompose + passes) and from the plan cache.

Run: ``python -m benchmarks.plan [--runs N]``. Prints one table in microseconds (medians).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from functools import partial

from ayo.apps import APPS, AppTemplate
from ayo.passes import CompileContext, compile_workflow
from ayo.runtime.plan_cache import PlanCache


def _machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    return (
        f"{model}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()}"
    )


def _median_us(fn, runs: int, per_sample: int = 1) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        for _ in range(per_sample):
            fn()
        samples.append((time.perf_counter_ns() - start) / per_sample / 1000)
    return statistics.median(samples)


def _row(name: str, app: AppTemplate, runs: int) -> str:
    shape = app.example_shape(documents=16)
    ctx = CompileContext(shape=shape.bucket())
    wf = app.workflow(shape)
    base, opt = compile_workflow(wf, ctx, optimize=False), compile_workflow(wf, ctx)
    lower_us = _median_us(partial(app.workflow, shape), runs)
    cold_base = _median_us(lambda: PlanCache().get(app, shape, optimize=False), runs)
    cold_opt = _median_us(lambda: PlanCache().get(app, shape), runs)
    cache = PlanCache()
    cache.get(app, shape)
    cached = _median_us(partial(cache.get, app, shape), runs, per_sample=100)
    nodes = f"{len(base.nodes)}->{len(opt.nodes)}"
    return (
        f"{name:<16}{nodes:>10}{lower_us:>11.1f}{cold_base:>15.1f}{cold_opt:>13.1f}"
        f"{cached:>11.2f}{cold_opt / cached:>12.0f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200, help="samples per measurement")
    args = parser.parse_args()
    print(f"machine: {_machine()}")
    print(f"median of {args.runs} samples; cached: 100 lookups per sample\n")
    header = f"{'app':<16}{'nodes':>10}{'lower us':>11}{'cold unopt us':>15}{'cold opt us':>13}{'cached us':>11}{'cold/cached':>13}"
    print(header)
    print("-" * len(header))
    for name, app in APPS.items():
        print(_row(name, app, args.runs))
    print(
        "\nlower us: building the app's workflow from its template (no decomposition); cold: build + decompose"
    )
    print(
        "(+ passes when opt) + validation, on an empty cache; cached: a hit, shape bucketing included."
    )


if __name__ == "__main__":
    main()
