"""Traces from engine scheduler batches: Chrome trace JSON and a Gantt picture."""

import asyncio
import json
import random

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ayo.runtime.tracing import Trace
from ayo.scheduler.batching.engine_scheduler import EngineScheduler
from ayo.scheduler.batching.policies import BatchLimits, PendingRequest


class SleepyEngine:
    async def run_batch(self, payloads):
        await asyncio.sleep(0.005)
        return payloads


async def test_trace_records_every_primitive_with_its_batch(tmp_path):
    trace = Trace()
    scheds = {
        name: EngineScheduler(
            SleepyEngine(),
            name,
            limits=BatchLimits(max_items=4, max_wait_ms=2),
            on_batch=trace.add_batch,
        )
        for name in ("embedder", "llm")
    }
    for s in scheds.values():
        s.start()
    await asyncio.gather(
        *(
            scheds[engine].submit(PendingRequest(query_id=q, node_id=f"{engine}-{q}"))
            for q in range(3)
            for engine in ("embedder", "llm")
        )
    )
    for s in scheds.values():
        await s.stop()
    assert len(trace.spans) == 6
    assert {s.batch_size for s in trace.spans} == {3}
    assert all(s.enqueued <= s.start < s.end for s in trace.spans)
    assert len(trace.for_query(1).spans) == 2

    chrome = trace.to_chrome()
    rows = {e["args"]["name"]: e["tid"] for e in chrome["traceEvents"] if e["ph"] == "M"}
    assert set(rows) == {"embedder", "llm"}
    spans = [e for e in chrome["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 6 and all(e["dur"] > 0 and e["ts"] >= 0 for e in spans)
    assert {e["tid"] for e in spans if e["name"].startswith("llm")} == {rows["llm"]}
    path = tmp_path / "trace.json"
    trace.write_chrome(path)
    assert json.loads(path.read_text())["traceEvents"]

    png = tmp_path / "gantt.png"
    trace.for_query(0).write_gantt(png, title="query 0")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rows_become_spans_in_order_when_read():
    from ayo.runtime.tracing import Span

    trace = Trace(origin=1.0)
    trace.add(Span(1, "embed", "embedder", 1.0, 1.5, 2.0, 4, True))
    trace.add(Span(1, "format", "control", 2.0, 2.0, 2.1))
    trace.add(Span(2, "search", "index", 1.2, 2.0, 2.5, 1, False))
    assert [s.node_id for s in trace.spans] == ["embed", "format", "search"]
    assert trace.spans[2] == Span(2, "search", "index", 1.2, 2.0, 2.5, 1, False)
    assert trace.to_json()[0]["batch_size"] == 4 and trace.for_query(2).spans[0].ok is False


def test_loop_histogram_exposes_what_a_prometheus_histogram_does():
    import re

    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from ayo.runtime.metrics import LoopHistogram

    buckets = (0.001, 0.01, 1, 2.5)
    ref_registry, registry = CollectorRegistry(), CollectorRegistry()
    ref = Histogram("x_seconds", "doc", ["engine", "op"], buckets=buckets, registry=ref_registry)
    ours = LoopHistogram("x_seconds", "doc", ["engine", "op"], buckets)
    registry.register(ours)
    for value, labels in [(0.5, ("a", "b")), (0.001, ("a", "b")), (3, ("a", "c")), (0, ("z", "b"))]:
        ref.labels(*labels).observe(value)
        ours.observe(labels, value)

    def text(r):  # creation times differ
        return re.sub(r"(_created\{[^}]*\}) \S+", r"\1", generate_latest(r).decode())

    assert text(registry) == text(ref_registry)

    # Many observations, on the bounds and between them, folded in several goes.
    rng = random.Random(0)
    for i in range(5000):
        value = rng.choice(buckets) if i % 3 == 0 else rng.uniform(0, 3)
        labels = rng.choice([("a", "b"), ("a", "c"), ("q", "r")])
        ref.labels(*labels).observe(value)
        ours.observe(labels, value)
        if i % 1777 == 0:
            ours.fold()

    def samples(r):
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(generate_latest(r).decode())
            for s in family.samples
            if not s.name.endswith("_created")
        }

    got, want = samples(registry), samples(ref_registry)
    assert got.keys() == want.keys()
    assert all(got[k] == pytest.approx(want[k], rel=1e-12) for k in want)


def test_loop_counter_exposes_what_a_prometheus_counter_does():
    import re

    from prometheus_client import CollectorRegistry, Counter, generate_latest

    from ayo.runtime.metrics import LoopCounter

    ref_registry, registry = CollectorRegistry(), CollectorRegistry()
    ref = Counter("ayo_things", "doc", ["app", "reason"], registry=ref_registry)
    ours = LoopCounter("ayo_things", "doc", ["app", "reason"])
    registry.register(ours)
    for labels, amount in [(("a", "x"), 1), (("b", "y"), 2.5), (("a", "x"), 1)]:
        ref.labels(*labels).inc(amount)
        ours.inc(labels, amount)

    def text(r):  # creation times differ
        return re.sub(r"(_created\{[^}]*\}) \S+", r"\1", generate_latest(r).decode())

    assert text(registry) == text(ref_registry)
