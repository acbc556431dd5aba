"""The engines of an App: registered by name, each behind the one place that orders and batches
its requests, and a proxy with the interface the plans call (``ayo.scheduler.ir.engine_api``).

An embedder, index, keyword index or reranker gets an engine scheduler per instance (a queue, the
batching policy, batch limits); the engine computes each batch as given. An LLM engine orders and
batches its own steps: it gets the policy as its step order and no queue in front of it.

Several engines of one kind get distinct names (``llm`` and ``judge``); several *instances* of one
engine (a list) share its name and are load-balanced (queue length; for LLMs KV usage and open
sequences, a sequence staying on its instance). A vector index holds collections, so it is one
instance.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ayo.scheduler.batching.admission import Admission
from ayo.scheduler.batching.engine_scheduler import BatchRecord, EnginePool, EngineScheduler
from ayo.scheduler.batching.llm_proxy import BatchedLLM
from ayo.scheduler.batching.policies import POLICIES, BatchLimits
from ayo.scheduler.batching.proxies import (
    BatchedEmbedder,
    BatchedIndex,
    BatchedKeywordIndex,
    BatchedReranker,
    EmbedRunner,
    IndexRunner,
    KeywordRunner,
    MergingRunner,
    RerankRunner,
)
from ayo.scheduler.ir.engine_api import KINDS, engine_kind

log = logging.getLogger(__name__)

_RUNNERS: dict[str, Callable[[Any], MergingRunner]] = {
    "embedder": EmbedRunner,
    "index": IndexRunner,
    "keyword": KeywordRunner,
    "reranker": RerankRunner,
}


@dataclass(frozen=True)
class SchedulerConfig:
    """How one engine's requests are ordered and batched.

    Attributes:
        policy: batching policy, one of ``fcfs``, ``depth``, ``critical_path`` (for an LLM: the
            order of its steps).
        limits: per-batch limits (items, tokens, fill wait); not for LLMs, which fill each
            step under their own token budget.
        max_queue: pending requests before callers wait (backpressure).
        max_inflight: batches computed at once per instance.
        policy_options: e.g. ``{"aging_ms_per_ms": 0.5}`` for ``critical_path``.
        max_running: LLMs only: decodes running at once per instance (bounded by its KV cache);
            waiting ones are admitted in policy order. None: the engine admits everything.
    """

    policy: str = "critical_path"
    limits: BatchLimits = field(default_factory=BatchLimits)
    max_queue: int = 4096
    max_inflight: int = 1
    policy_options: Mapping[str, float] = field(default_factory=dict)
    max_running: int | None = None

    def __post_init__(self) -> None:
        if self.max_running is not None and self.max_running < 1:
            raise ValueError(f"max_running must be >= 1 or None, got {self.max_running}")
        if self.policy not in POLICIES:
            raise ValueError(f"unknown batching policy {self.policy!r}; choose one of {POLICIES}")
        if self.max_queue < 1 or self.max_inflight < 1:
            raise ValueError("max_queue and max_inflight must be >= 1")


@dataclass
class _Entry:
    name: str
    kind: str
    instances: list[Any]
    config: SchedulerConfig
    schedulers: list[EngineScheduler] = field(default_factory=list)
    llm: BatchedLLM | None = None


class EngineSet:
    """Engines by name, their schedulers and their batching proxies (``proxies``)."""

    def __init__(
        self,
        on_batch: Callable[[BatchRecord], None],
        clock: Callable[[], float] = time.monotonic,
        default_policy: str = "critical_path",
    ) -> None:
        if default_policy not in POLICIES:
            raise ValueError(
                f"unknown batching policy {default_policy!r}; choose one of {POLICIES}"
            )
        self._entries: dict[str, _Entry] = {}
        self._on_batch = on_batch
        self.clock = clock
        self.default_policy = default_policy
        self.proxies: dict[str, Any] = {}
        self.started = False

    def add(
        self,
        name: str,
        engine: Any | Sequence[Any],
        *,
        config: SchedulerConfig | None = None,
    ) -> None:
        if self.started:
            raise RuntimeError(f"cannot add engine {name!r}: the app is already running")
        if name in self._entries:
            raise ValueError(f"an engine named {name!r} is already registered")
        instances = list(engine) if isinstance(engine, (list, tuple)) else [engine]
        if not instances:
            raise ValueError(f"engine {name!r}: give at least one instance")
        kinds = {engine_kind(e) for e in instances}
        if len(kinds) != 1:
            raise ValueError(f"engine {name!r}: instances must share one kind of {KINDS}")
        found = kinds.pop()
        if found == "index" and len(instances) > 1:
            raise ValueError(
                f"engine {name!r}: a vector index holds collections and cannot be pooled; "
                "register one instance"
            )
        cfg = config or SchedulerConfig(self.default_policy)
        self._entries[name] = _Entry(name, found, instances, cfg)

    def kinds(self) -> dict[str, str]:
        return {n: e.kind for n, e in self._entries.items()}

    def instances(self, name: str) -> list[Any]:
        return self._entries[name].instances

    def resources(self) -> dict[str, str]:
        """Engine name -> the name of the first engine registered with the same instances
        (``judge`` -> ``llm`` when the judge is the LLM): what computes on one resource."""
        first: dict[tuple[int, ...], str] = {}
        return {
            name: first.setdefault(tuple(id(i) for i in e.instances), name)
            for name, e in self._entries.items()
        }

    def build(self) -> None:
        """Create schedulers and proxies and start the dispatchers (needs a running loop)."""
        if self.started:
            return
        for e in self._entries.values():
            rows = (
                [e.name]
                if len(e.instances) == 1
                else [f"{e.name}#{i}" for i in range(len(e.instances))]
            )
            if e.kind == "llm":
                e.llm = self._llm(e, rows)
                self.proxies[e.name] = e.llm
                continue
            cfg = e.config
            e.schedulers = [
                EngineScheduler(
                    _RUNNERS[e.kind](inst),
                    row,
                    policy=cfg.policy,
                    limits=cfg.limits,
                    max_queue=cfg.max_queue,
                    max_inflight=cfg.max_inflight,
                    on_batch=self._on_batch,
                    clock=self.clock,
                    **dict(cfg.policy_options),
                )
                for inst, row in zip(e.instances, rows)
            ]
            for s in e.schedulers:
                s.start()
            target = e.schedulers[0] if len(e.schedulers) == 1 else EnginePool(e.schedulers)
            if e.kind == "embedder":
                self.proxies[e.name] = BatchedEmbedder(target)
            elif e.kind == "index":
                self.proxies[e.name] = BatchedIndex(target, e.instances[0])
            elif e.kind == "keyword":
                self.proxies[e.name] = BatchedKeywordIndex(target)
            else:
                self.proxies[e.name] = BatchedReranker(target)
        self.started = True

    def _llm(self, e: _Entry, rows: list[str]) -> BatchedLLM:
        cfg = e.config
        admissions = None
        if cfg.max_running is not None:
            admissions = [
                Admission(row, cfg.max_running, cfg.policy, self.clock, **dict(cfg.policy_options))
                for row in rows
            ]
        return BatchedLLM(
            e.name,
            e.instances,
            admissions,
            on_batch=self._on_batch,
            clock=self.clock,
            policy=cfg.policy,
            policy_options=cfg.policy_options,
        )

    def _distinct_instances(self) -> list[Any]:
        seen: dict[int, Any] = {}
        for e in self._entries.values():
            for inst in e.instances:
                seen.setdefault(id(inst), inst)
        return list(seen.values())

    async def start_instances(self) -> None:
        """Await ``start()`` of every engine instance that has one (worker threads, remote
        actors), once each, all at once: remote actors start and load their models together.
        The first failure is raised once every start has ended."""
        starts = [i.start() for i in self._distinct_instances()]
        for result in await asyncio.gather(*starts, return_exceptions=True):
            if isinstance(result, BaseException):
                raise result

    async def stop_instances(self) -> None:
        for inst in reversed(self._distinct_instances()):
            await inst.stop()

    async def health(self, timeout_s: float = 2.0) -> list[dict[str, Any]]:
        """Every engine instance, as ``/health`` lists them: name, instance (the row its
        scheduler reports as), kind, ``where`` (``local`` or ``remote``) and ``state``; a remote
        instance is pinged (``RemoteEngine.health``: node, process, restarts, failed calls)."""
        distinct = self._distinct_instances()
        pinged = await asyncio.gather(*(inst.health(timeout_s) for inst in distinct))
        health = {id(inst): h for inst, h in zip(distinct, pinged)}
        rows = []
        for e in self._entries.values():
            for i, inst in enumerate(e.instances):
                row = {"engine": e.name, "kind": e.kind,
                       "instance": e.name if len(e.instances) == 1 else f"{e.name}#{i}"}  # fmt: skip
                rows.append({**row, **health[id(inst)]})
        return rows

    def queue_depths(self) -> dict[str, int]:
        """Requests waiting per engine instance (for an LLM: prefills not yet computed)."""
        depths = {}
        for e in self._entries.values():
            if e.llm is not None:
                depths.update(zip(e.llm.rows, e.llm.in_flight))
            depths.update((s.name, s.queue_length) for s in e.schedulers)
        return depths

    def stats(self) -> dict[str, dict[str, float]]:
        return {s.name: s.stats() for e in self._entries.values() for s in e.schedulers}

    async def stop(self) -> None:
        for e in self._entries.values():
            for s in e.schedulers:
                await s.stop()
            e.schedulers, e.llm = [], None
        self.proxies.clear()
        self.started = False
