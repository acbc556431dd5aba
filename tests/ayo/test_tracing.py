"""Traces from engine scheduler batches: Chrome trace JSON and a Gantt picture."""

import asyncio
import json

from ayo.scheduler.batching import BatchLimits, PendingRequest
from ayo.scheduler.engine_scheduler import EngineScheduler
from ayo.tracing import Trace


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
