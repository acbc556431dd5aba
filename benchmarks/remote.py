"""What a remote engine call costs: the same engine in process and in a Ray actor on a second
node of a loopback-only cluster, called through the App's runtime, in the same run.

    python -m benchmarks.remote [--calls 300]

Rows: one ``embed`` call of one text straight on the engine object (in process: the fake
embedder, answering at once; remote: ``RemoteEngine`` over the same fake in an actor), and a
``naive_rag`` query on the fake engines with the embedder in process or remote (5 engine
primitives, 1 of them remote). Needs the ``ray`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import time

from .common import machine, print_table, setup_benchmark_logging


async def _median_us(call, n: int) -> float:
    for _ in range(10):  # warm-up
        await call()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


async def measure(calls: int) -> list[list[object]]:
    from ayo.cluster.remote import RemoteEngine
    from ayo.runtime.app import App
    from ayo.scheduler.sim.fakes import fake_engine, fake_engines

    local = fake_engine("embedder")
    remote = RemoteEngine(functools.partial(fake_engine, "embedder"), "embedder",
                          resources={"worker": 0.1}, num_cpus=0)  # fmt: skip
    apps = {"in process": App.fake(), "remote": App()}
    for name, engine in fake_engines().items():
        apps["remote"].add_engine(name, remote if name == "embedder" else engine)
    inputs = {"question": "why do stars shine"}
    rows = []
    async with apps["in process"], apps["remote"]:
        direct = {
            "in process": await _median_us(lambda: local.embed(["a text"]), calls),
            "remote": await _median_us(lambda: remote.embed(["a text"]), calls),
        }
        query = {
            where: await _median_us(lambda app=app: app.run("naive_rag", inputs), calls)
            for where, app in apps.items()
        }
    for what, values in (("embed call, on the engine", direct), ("naive_rag query", query)):
        extra = values["remote"] - values["in process"]
        rows.append(
            [what, f"{values['in process']:.0f}", f"{values['remote']:.0f}", f"{extra:.0f}"]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.remote", description=__doc__.split("\n")[0]
    )
    p.add_argument("--calls", type=int, default=300, help="timed calls per row (median)")
    args = p.parse_args(argv)
    setup_benchmark_logging()
    import ray

    from ayo.cluster.remote import start_loopback_cluster

    cluster = start_loopback_cluster([{"num_cpus": 1, "resources": {"worker": 1}}])
    try:
        rows = asyncio.run(measure(args.calls))
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(
        f"# {machine()}; Ray {ray.__version__}, two nodes on 127.0.0.1; median of {args.calls} calls"
    )
    print_table(["what", "in process µs", "remote µs", "remote adds µs"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
