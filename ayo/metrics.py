"""Prometheus metrics of one App, on its own registry (the server exposes it at ``/metrics``).

- ``ayo_queries_total{app}`` / ``ayo_queries_failed_total{app,reason}``: counters;
- ``ayo_query_latency_seconds{app}``: end-to-end latency histogram;
- ``ayo_batch_size{engine}``: requests per engine batch;
- ``ayo_primitive_latency_seconds{engine,op}``: queued + run time of each primitive request;
- ``ayo_engine_queue_depth{engine}``: pending requests, read from the schedulers at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

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


class AppMetrics:
    """Counters and histograms of one App; ``queue_depths`` is read at each scrape."""

    def __init__(self, queue_depths: Callable[[], Mapping[str, int]]) -> None:
        self.registry = CollectorRegistry()
        self.queries = Counter("ayo_queries", "Queries started", ["app"], registry=self.registry)
        self.failed = Counter(
            "ayo_queries_failed", "Queries that failed", ["app", "reason"], registry=self.registry
        )
        self.latency = Histogram(
            "ayo_query_latency_seconds",
            "End-to-end query latency",
            ["app"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "ayo_batch_size",
            "Requests per engine batch",
            ["engine"],
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )
        self.primitive_latency = Histogram(
            "ayo_primitive_latency_seconds",
            "Queued plus run time of a primitive's engine request",
            ["engine", "op"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_QueueDepth(queue_depths))
        self._children: dict[tuple[str, str], object] = {}

    def batch(self, record: BatchRecord) -> None:
        self.batch_size.labels(record.engine).observe(len(record.requests))
        for r in record.requests:
            key = (record.engine, r.extra.get("op", ""))
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self.primitive_latency.labels(*key)
            child.observe(record.ended - r.enqueued_at)  # type: ignore[attr-defined]

    def query_done(self, app: str, seconds: float) -> None:
        self.queries.labels(app).inc()
        self.latency.labels(app).observe(seconds)

    def query_failed(self, app: str, exc: BaseException) -> None:
        self.queries.labels(app).inc()
        self.failed.labels(app, type(exc).__name__).inc()

    def exposition(self) -> bytes:
        """The text format served at ``/metrics``."""
        return generate_latest(self.registry)
