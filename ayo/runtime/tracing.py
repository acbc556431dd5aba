"""Per-query traces: when each primitive was queued, batched, started and ended on which engine.

A :class:`Trace` collects :class:`Span` objects (from engine schedulers' batch records or from
the runtime directly) and exports them as Chrome trace JSON (``chrome://tracing`` / Perfetto:
one row per engine) or as a Gantt picture (matplotlib, written to a file; nothing is kept in
the repository).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ayo.scheduler.batching.engine_scheduler import BatchRecord


@dataclass(slots=True)
class Span:
    """One primitive of one query on one engine. Times in seconds on one monotonic clock.
    (Slotted, not frozen: the runtime makes one per primitive, and a frozen dataclass's
    ``__init__`` costs a call per field.)"""

    query_id: int
    node_id: str
    engine: str
    enqueued: float
    start: float
    end: float
    batch_size: int = 1
    ok: bool = True

    @property
    def queued_s(self) -> float:
        return self.start - self.enqueued

    @property
    def run_s(self) -> float:
        return self.end - self.start


class Trace:
    """Spans of one or more queries; ``origin`` is the clock value shown as time 0."""

    def __init__(self, spans: Iterable[Span] = (), origin: float | None = None) -> None:
        self.spans: list[Span] = list(spans)
        self.origin = origin

    def __len__(self) -> int:
        return len(self.spans)

    def __repr__(self) -> str:
        return f"Trace(spans={self.spans!r}, origin={self.origin!r})"

    def add(self, span: Span) -> None:
        self.spans.append(span)

    def add_batch(self, record: BatchRecord) -> None:
        """All requests of one finished engine batch."""
        size, spans = len(record.requests), self.spans
        for r in record.requests:
            spans.append(
                Span(r.query_id, r.node_id, record.engine, r.enqueued_at, record.started,
                     record.ended, size, record.ok)
            )  # fmt: skip

    def for_query(self, query_id: int) -> Trace:
        return Trace([s for s in self.spans if s.query_id == query_id], self.origin)

    def _t0(self) -> float:
        if self.origin is not None:
            return self.origin
        return min((s.enqueued for s in self.spans), default=0.0)

    def engines(self) -> list[str]:
        return sorted({s.engine for s in self.spans})

    def to_chrome(self) -> dict[str, Any]:
        """Chrome trace event format: a complete ("X") event per span, one thread per engine,
        queueing time as a separate event on the same row."""
        t0 = self._t0()
        rows = {name: i + 1 for i, name in enumerate(self.engines())}
        events: list[dict[str, Any]] = [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": name}}
            for name, tid in rows.items()
        ]
        for s in sorted(self.spans, key=lambda s: (s.start, s.engine)):
            args = {"query": s.query_id, "batch_size": s.batch_size, "ok": s.ok}
            events.append(
                {
                    "ph": "X",
                    "name": s.node_id,
                    "cat": f"query{s.query_id}",
                    "pid": 1,
                    "tid": rows[s.engine],
                    "ts": (s.start - t0) * 1e6,
                    "dur": max(s.run_s, 0.0) * 1e6,
                    "args": {**args, "queued_us": s.queued_s * 1e6},
                }
            )
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def to_json(self) -> list[dict[str, Any]]:
        return [asdict(s) for s in self.spans]

    def write_chrome(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_chrome()))

    def write_gantt(self, path: str | Path, title: str = "") -> None:
        """A Gantt chart (PNG/SVG by extension): one row per engine, a bar per primitive
        labelled with its node, colored by query; hatched where it failed."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        t0 = self._t0()
        engines = self.engines()
        queries = sorted({s.query_id for s in self.spans})
        colors = plt.get_cmap("tab10")
        fig, ax = plt.subplots(figsize=(10, 0.6 * len(engines) + 1.5))
        for s in self.spans:
            y = engines.index(s.engine)
            ax.barh(
                y,
                max(s.run_s, 1e-6) * 1e3,
                left=(s.start - t0) * 1e3,
                color=colors(queries.index(s.query_id) % 10),
                edgecolor="black",
                hatch="//" if not s.ok else None,
                height=0.6,
            )
            ax.text((s.start - t0) * 1e3, y, s.node_id, va="center", fontsize=6, clip_on=True)
        ax.set_yticks(range(len(engines)), engines)
        ax.set_xlabel("time (ms)")
        ax.set_title(title or f"{len(queries)} quer{'y' if len(queries) == 1 else 'ies'}")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)


def spans_from(records: Iterable[BatchRecord]) -> Trace:
    trace = Trace()
    for r in records:
        trace.add_batch(r)
    return trace
