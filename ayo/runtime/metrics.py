"""Prometheus metrics of one App, on its own registry (the server exposes it at ``/metrics``).

- ``ayo_queries_total{app}`` / ``ayo_queries_failed_total{app,reason}``: counters;
- ``ayo_query_latency_seconds{app}``: end-to-end latency histogram;
- ``ayo_batch_size{engine}``: requests per engine batch;
- ``ayo_primitive_latency_seconds{engine,op}``: queued + run time of each primitive request;
- ``ayo_engine_queue_depth{engine}``: pending requests, read from the schedulers at scrape time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ayo.scheduler.batching.engine_scheduler import BatchRecord

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class _QueueDepth(Collector):
    def __init__(self, read: Callable[[], Mapping[str, int]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily(
            "ayo_engine_queue_depth", "Pending requests per engine instance", labels=["engine"]
        )
        for engine, depth in sorted(self._read().items()):
            gauge.add_metric([engine], depth)
        yield gauge


class LoopHistogram(Collector):
    """A labelled histogram observed from the event loop's thread only. An observation is an
    append to its series' list (no lock, no bisect); the lists are folded into the buckets
    (one numpy ``searchsorted`` per series) by :meth:`fold`, which the owner calls every few
    thousand observations, and before every scrape. The exposition is the same as
    ``prometheus_client.Histogram``'s (buckets, count, sum, created)."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = [float(b) for b in buckets]
        self._bounds = np.asarray(self.bounds)
        self._series: dict[tuple[str, ...], list[float]] = {}  # counts per bucket, sum, created
        self._pending: dict[tuple[str, ...], list[float]] = {}  # observations not folded yet

    def values(self, labels: tuple[str, ...]) -> list[float]:
        """The list to append observations of ``labels`` to (folded by :meth:`fold`)."""
        pending = self._pending.get(labels)
        if pending is None:
            self._series[labels] = [0] * (len(self.bounds) + 1) + [0.0, time.time()]
            pending = self._pending[labels] = []
        return pending

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        self.values(labels).append(value)

    def fold(self) -> None:
        """Move the pending observations into the buckets (``le``: value <= bound)."""
        for labels, pending in self._pending.items():
            if not pending:
                continue
            row = self._series[labels]
            where = np.searchsorted(self._bounds, pending, side="left")
            for i, count in enumerate(np.bincount(where, minlength=len(self.bounds) + 1)):
                row[i] += int(count)
            row[-2] += math.fsum(pending)
            pending.clear()

    def collect(self) -> Iterator[Metric]:
        self.fold()
        metric = Metric(self.name, self.documentation, "histogram")
        les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        for labels, row in sorted(self._series.items()):
            base = dict(zip(self.labelnames, labels))
            total = 0
            for le, count in zip(les, row):
                total += count
                metric.add_sample(f"{self.name}_bucket", {**base, "le": le}, total)
            metric.add_sample(f"{self.name}_count", base, total)
            metric.add_sample(f"{self.name}_sum", base, row[-2])
            metric.add_sample(f"{self.name}_created", base, row[-1])
        yield metric


class LoopCounter(Collector):
    """A labelled counter incremented from the event loop's thread only (no lock); exposed as
    ``prometheus_client.Counter`` exposes one (``_total`` and ``_created``)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._values: dict[tuple[str, ...], list[float]] = {}  # value, created

    def series(self, labels: tuple[str, ...]) -> list[float]:
        row = self._values.get(labels)
        if row is None:
            row = self._values[labels] = [0.0, time.time()]
        return row

    def inc(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        self.series(labels)[0] += amount

    def collect(self) -> Iterator[Metric]:
        metric = Metric(self.name, self.documentation, "counter")
        for labels, (value, created) in sorted(self._values.items()):
            base = dict(zip(self.labelnames, labels))
            metric.add_sample(f"{self.name}_total", base, value)
            metric.add_sample(f"{self.name}_created", base, created)
        yield metric


_FOLD_EVERY = 4096  # observations between folds: bounds the pending lists' memory


class AppMetrics:
    """Counters and histograms of one App; ``queue_depths`` is read at each scrape."""

    def __init__(self, queue_depths: Callable[[], Mapping[str, int]]) -> None:
        self.registry = CollectorRegistry()
        self.queries = LoopCounter("ayo_queries", "Queries started", ["app"])
        self.failed = LoopCounter("ayo_queries_failed", "Queries that failed", ["app", "reason"])
        self.latency = LoopHistogram(
            "ayo_query_latency_seconds", "End-to-end query latency", ["app"], _LATENCY_BUCKETS
        )
        self.batch_size = LoopHistogram(
            "ayo_batch_size", "Requests per engine batch", ["engine"], _BATCH_BUCKETS
        )
        self.primitive_latency = LoopHistogram(
            "ayo_primitive_latency_seconds",
            "Queued plus run time of a primitive's engine request",
            ["engine", "op"],
            _LATENCY_BUCKETS,
        )
        self._histograms = (self.latency, self.batch_size, self.primitive_latency)
        for collector in (self.queries, self.failed, *self._histograms):
            self.registry.register(collector)
        self.registry.register(_QueueDepth(queue_depths))
        self._batch_sizes: dict[str, list[float]] = {}
        self._rows: dict[str, dict[str, list[float]]] = {}  # engine -> op -> pending latencies
        self._apps: dict[str, tuple[list[float], list[float]]] = {}
        self._unfolded = 0

    def batch(self, record: BatchRecord) -> None:
        """One finished engine batch: its size, and the queued + run time of each request."""
        engine, ended = record.engine, record.ended
        sizes = self._batch_sizes.get(engine)
        if sizes is None:
            sizes = self._batch_sizes[engine] = self.batch_size.values((engine,))
        sizes.append(len(record.requests))
        per_op = self._rows.get(engine)
        if per_op is None:
            per_op = self._rows[engine] = {}
        for r in record.requests:
            values = per_op.get(r.op)
            if values is None:
                values = per_op[r.op] = self.primitive_latency.values((engine, r.op))
            values.append(ended - r.enqueued_at)
        self._observed(len(record.requests) + 1)

    def query_done(self, app: str, seconds: float) -> None:
        rows = self._apps.get(app)
        if rows is None:
            rows = self._apps[app] = (self.queries.series((app,)), self.latency.values((app,)))
        rows[0][0] += 1
        rows[1].append(seconds)
        self._observed(1)

    def query_failed(self, app: str, exc: BaseException) -> None:
        self.queries.inc((app,))
        self.failed.inc((app, type(exc).__name__))

    def _observed(self, count: int) -> None:
        self._unfolded += count
        if self._unfolded >= _FOLD_EVERY:
            self.fold()

    def fold(self) -> None:
        """Fold the pending observations into the histograms' buckets."""
        for histogram in self._histograms:
            histogram.fold()
        self._unfolded = 0

    def exposition(self) -> bytes:
        """The text format served at ``/metrics``."""
        return generate_latest(self.registry)
