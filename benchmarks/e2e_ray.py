"""``python -m benchmarks.e2e --ray``: the LLM as 1 local instance vs 1 local + 1 remote replica
(a Ray actor on a second node of a loopback-only cluster on this machine), behind one engine
scheduler, under the same Poisson arrivals; then what a remote call adds per primitive, in the
same run (``benchmarks.remote``'s measurement on fake engines).

Both setups build fresh engines, plan with the same stored profile and empty every LLM
instance's prefix cache before each query (serial) or each mode's run (Poisson), the remote
one through :meth:`ayo.cluster.remote.RemoteEngine.apply` (``e2e.prefix_cache_reset``).
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

SETUPS = (("1 local LLM", 0), ("1 local + 1 remote LLM", 1))
WORKER = {"worker": 1}  # the second node's resource; each actor takes a fraction of it


def start_cluster(args: argparse.Namespace) -> Any:
    """A head (this driver's node) and one worker node, both on 127.0.0.1; the worker has the
    CPUs of one remote LLM (its torch threads) and room for the overhead benchmark's fake."""
    from ayo.cluster.remote import start_loopback_cluster

    return start_loopback_cluster(
        [{"num_cpus": max(1, args.llm_threads), "resources": WORKER}], object_store_mb=200
    )


def remote_llm(args: argparse.Namespace) -> Any:
    """The LLM replica on the worker node, built there as the local one is built here."""
    from ayo.cluster.remote import RemoteEngine
    from ayo.runtime.defaults import default_llm

    factory = functools.partial(default_llm, **engine_options(args).llm_kwargs())
    return RemoteEngine(
        factory, "llm", resources={"worker": 0.5}, num_cpus=max(1, args.llm_threads)
    )


def clear_prefix_cache(engine: Any) -> None:
    """Empties an LLM engine's prefix cache (in its Ray actor: ``RemoteEngine.apply``)."""
    engine.reset_prefix_cache()


def engine_options(args: argparse.Namespace) -> Any:
    """The default engines as this benchmark runs them (``--dtype``, threads, answer cap)."""
    from ayo.runtime.defaults import EngineOptions

    return EngineOptions(
        dtype=args.dtype, data_dir=args.data_dir, collection=args.collection,
        llm_threads=args.llm_threads or None, embedder_threads=args.embedder_threads or None,
        max_new_tokens=args.max_tokens,
    )  # fmt: skip
