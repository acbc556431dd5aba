"""Prometheus metrics of one App, on its own registry (the server exposes it at ``/metrics``).

- ``ayo_queries_total{app}`` / ``ayo_queries_failed_total{app,reason}``: counters;
- ``ayo_query_latency_seconds{app}``: end-to-end latency histogram;
- ``ayo_batch_size{engine}``: requests per engine batch;
- ``ayo_primitive_latency_seconds{engine,op}``: queued + run time of each primitive request;
- ``ayo_engine_queue_depth{engine}``: pending requests, read from the schedulers at scrape time.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ayo.scheduler.engine_scheduler import BatchRecord

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
    """A labelled histogram observed from the event loop's thread only: an observation is a
    bisect and two additions (no lock, no per-observation objects); the exposition is the same
    as ``prometheus_client.Histogram``'s (buckets, count, sum, created)."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = [float(b) for b in buckets]
        self._series: dict[tuple[str, ...], list[float]] = {}  # counts per bucket, sum, created

    def series(self, labels: tuple[str, ...]) -> list[float]:
        """The mutable row of ``labels``: observe with :meth:`observe_into`."""
        row = self._series.get(labels)
        if row is None:
            row = self._series[labels] = [0] * (len(self.bounds) + 1) + [0.0, time.time()]
        return row

    def observe_into(self, row: list[float], value: float) -> None:
        row[bisect_left(self.bounds, value)] += 1
        row[-2] += value

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        self.observe_into(self.series(labels), value)

    def collect(self) -> Iterator[Metric]:
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


class AppMetrics:
    """Counters and histograms of one App; ``queue_depths`` is read at each scrape."""

    def __init__(self, queue_depths: Callable[[], Mapping[str, int]]) -> None:
        self.registry = CollectorRegistry()
        self.queries = Counter("ayo_queries", "Queries started", ["app"], registry=self.registry)
        self.failed = Counter(
            "ayo_queries_failed", "Queries that failed", ["app", "reason"], registry=self.registry
        )
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
        for histogram in (self.latency, self.batch_size, self.primitive_latency):
            self.registry.register(histogram)
        self.registry.register(_QueueDepth(queue_depths))
        self._batch_sizes: dict[str, list[float]] = {}
        self._rows: dict[tuple[str, str], list[float]] = {}
        self._apps: dict[str, tuple[object, object]] = {}

    def batch(self, record: BatchRecord) -> None:
        """One finished engine batch: its size, and each request's queued + run time."""
        sizes = self._batch_sizes.get(record.engine)
        if sizes is None:
            sizes = self._batch_sizes[record.engine] = self.batch_size.series((record.engine,))
        self.batch_size.observe_into(sizes, len(record.requests))
        rows, engine, ended = self._rows, record.engine, record.ended
        bounds, find = self.primitive_latency.bounds, bisect_left
        for r in record.primitives:
            row = rows.get((engine, r.op))
            if row is None:
                row = rows[(engine, r.op)] = self.primitive_latency.series((engine, r.op))
            value = ended - r.enqueued_at
            row[find(bounds, value)] += 1
            row[-2] += value

    def query_done(self, app: str, seconds: float) -> None:
        children = self._apps.get(app)
        if children is None:
            children = self._apps[app] = (self.queries.labels(app), self.latency.series((app,)))
        children[0].inc()  # type: ignore[attr-defined]
        self.latency.observe_into(children[1], seconds)  # type: ignore[arg-type]

    def query_failed(self, app: str, exc: BaseException) -> None:
        self.queries.labels(app).inc()
        self.failed.labels(app, type(exc).__name__).inc()

    def exposition(self) -> bytes:
        """The text format served at ``/metrics``."""
        return generate_latest(self.registry)
