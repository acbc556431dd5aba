"""The outputs of ``python -m benchmarks.e2e``: the table, the JSON, the pictures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .e2e_core import MODES, SettingResult

HEADERS = [
    "app",
    "load",
    "mode",
    "n",
    "mean s",
    "p50 s",
    "p99 s",
    "q/s",
    "speedup mean",
    "speedup p99",
    "equal answers",
]


def table_rows(results: list[SettingResult]) -> list[list[object]]:
    """Two rows per setting (optimized, then module by module); the ratios on the first."""
    rows: list[list[object]] = []
    for r in results:
        for mode in MODES:
            run = r.runs[mode]
            first = mode == MODES[0]
            rows.append(
                [
                    r.app if first else "",
                    r.load if first else "",
                    mode,
                    run.n,
                    f"{run.mean_ms / 1e3:.2f}",
                    f"{run.p50_ms / 1e3:.2f}",
                    f"{run.p99_ms / 1e3:.2f}",
                    f"{run.throughput_qps:.3f}",
                    f"{r.speedup:.2f}x" if first else "",
                    f"{r.speedup_p99:.2f}x" if first else "",
                    f"{r.equal_answers}/{run.n}" if first else "",
                ]
            )
    return rows


def write_json(path: Path, meta: dict[str, Any], results: list[SettingResult]) -> None:
    path.write_text(json.dumps({**meta, "settings": [r.to_json() for r in results]}, indent=1))


def plot_latency_vs_rate(path: Path, results: list[SettingResult], title: str) -> None:
    """Mean (solid) and p99 (dashed) latency against the offered rate, both modes, one panel
    per app; the serial (one at a time) mean as a dotted line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    apps = list(dict.fromkeys(r.app for r in results))
    fig, axes = plt.subplots(1, len(apps), figsize=(5.5 * len(apps), 4), squeeze=False)
    colors = {MODES[0]: "tab:blue", MODES[1]: "tab:orange"}
    for ax, name in zip(axes[0], apps):
        mine = [r for r in results if r.app == name]
        loaded = sorted((r for r in mine if r.rate_qps is not None), key=lambda r: r.rate_qps)
        for mode in MODES:
            xs = [r.rate_qps for r in loaded]
            ax.plot(xs, [r.runs[mode].mean_ms / 1e3 for r in loaded], "o-",
                    color=colors[mode], label=f"{mode} mean")  # fmt: skip
            ax.plot(xs, [r.runs[mode].p99_ms / 1e3 for r in loaded], "x--",
                    color=colors[mode], label=f"{mode} p99")  # fmt: skip
            for r in mine:
                if r.rate_qps is None:
                    ax.axhline(r.runs[mode].mean_ms / 1e3, color=colors[mode], ls=":",
                               label=f"{mode} one at a time")  # fmt: skip
        ax.set_xlabel("offered load (queries/s, Poisson)")
        ax.set_ylabel("latency (s)")
        ax.set_title(name)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_gantts(out: Path, results: list[SettingResult], app: str = "advanced_rag") -> list[Path]:
    """Gantt pictures (and Chrome traces) of ``app`` in each mode: its first serial query, and
    all queries of its highest Poisson rate on one time axis."""
    from ayo.tracing import Trace

    mine = [r for r in results if r.app == app]
    serial = [r for r in mine if r.rate_qps is None][:1]
    loaded = sorted((r for r in mine if r.rate_qps is not None), key=lambda r: r.rate_qps)[-1:]
    written: list[Path] = []
    for r, tag in [(x, "serial") for x in serial] + [(x, "poisson") for x in loaded]:
        for mode in MODES:
            run = r.runs[mode]
            if not run.traces:
                continue
            if tag == "serial":
                trace, title = run.traces[0], f"{run.latencies_ms[0] / 1e3:.2f} s"
            else:
                spans = [s for t in run.traces for s in t.spans]
                trace = Trace(spans, min(t.origin for t in run.traces))
                title = f"{run.n} queries, {r.load}, mean {run.mean_ms / 1e3:.2f} s"
            stem = out / f"gantt_{app}_{tag}_{mode}"
            trace.write_gantt(stem.with_suffix(".png"), title=f"{app}, {mode}: {title}")
            trace.write_chrome(stem.with_suffix(".json"))
            written.append(stem.with_suffix(".png"))
    return written
