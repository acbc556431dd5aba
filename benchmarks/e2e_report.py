"""The outputs of ``python -m benchmarks.e2e``: the table, the JSON, the pictures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .e2e_core import MODES, AblationResult, SettingResult

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


BOUND_HEADERS = [
    "app",
    "optimized s",
    "module-by-module s",
    "bound s",
    "set by",
    "best speedup",
    "speedup",
    "bound / optimized",
]


def bound_rows(results: list[SettingResult], bounds: dict[str, list[Any]]) -> list[list[object]]:
    """Per app, the serial setting beside its mean critical-path bound: the best speedup any
    schedule could reach (module by module / bound) and how near the optimized plan came."""
    rows: list[list[object]] = []
    for r in results:
        if r.rate_qps is not None or r.app not in bounds:
            continue
        mine = bounds[r.app]
        bound = sum(b.seconds for b in mine) / len(mine)
        limits = sorted({b.limit for b in mine})
        opt, mbm = (r.runs[m].mean_ms / 1e3 for m in MODES)
        rows.append([r.app, f"{opt:.2f}", f"{mbm:.2f}", f"{bound:.2f}", ", ".join(limits),
                     f"{mbm / bound:.2f}x", f"{mbm / opt:.2f}x", f"{bound / opt:.0%}"])  # fmt: skip
    return rows


ABLATION_HEADERS = ["app", "passes", "mean s", "speedup", "equal answers"]


def ablation_rows(ablation: list[AblationResult]) -> list[list[object]]:
    """One row per app and pass set: mean latency, speedup over none, answers equal to none's."""
    rows: list[list[object]] = []
    for a in ablation:
        for i, (label, run) in enumerate(a.runs.items()):
            rows.append([a.app if i == 0 else "", label, f"{run.mean_ms / 1e3:.2f}",
                         f"{a.speedup(label):.2f}x", f"{a.equal_answers(label)}/{run.n}"])  # fmt: skip
    return rows


def extras_json(extras: Any) -> dict[str, Any]:
    """The bounds and the ablation as JSON."""
    return {
        "bounds": {app: [{"seconds": b.seconds, "path_s": b.path_s, "resource_s": b.resource_s,
                          "cores_s": b.cores_s, "limit": b.limit} for b in bs]
                   for app, bs in extras.bounds.items()},
        "ablation": [{"app": a.app, "runs": {k: {**r.summary(), "answers": r.answers}
                                             for k, r in a.runs.items()}}
                     for a in extras.ablation],
    }  # fmt: skip


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
    from ayo.runtime.tracing import Trace

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


def policy_table(
    by_policy: dict[str, list[SettingResult]], throughput: bool = False
) -> tuple[list[str], list[list]]:
    """Headers and rows: per app and load, each policy's (or setup's) mean / p99 seconds, and
    with ``throughput`` its queries/s, optimized then module by module, and the answers equal
    between the two modes."""
    policies = list(by_policy)
    unit = ": mean / p99 s, q/s" if throughput else ""
    headers = ["app", "load"] + [f"{p} {m}{unit}" for m in ("opt", "mbm") for p in policies]
    headers.append("equal answers")
    per_app = {p: [x for r in by_policy[p] for x in r.per_app()] for p in policies}
    rows: list[list] = []
    for i, ref in enumerate(per_app[policies[0]]):
        cells = [per_app[p][i] for p in policies]
        row: list = [ref.app, ref.load.split(" (")[0]]
        for mode in MODES:
            for c in cells:
                run = c.runs[mode]
                cell = f"{run.mean_ms / 1e3:.2f} / {run.p99_ms / 1e3:.2f}"
                row.append(f"{cell}, {run.throughput_qps:.3f}" if throughput else cell)
        row.append(", ".join(f"{c.equal_answers}/{c.runs[MODES[0]].n}" for c in cells))
        rows.append(row)
    return headers, rows


def answers_equal_across(by_policy: dict[str, list[SettingResult]]) -> tuple[int, int]:
    """Questions whose answer (per app, or per mix) is the same in every policy, load and
    mode: (equal, total)."""
    answers: dict[tuple[str, int], set[str]] = {}
    for results in by_policy.values():
        for r in results:
            for run in r.runs.values():
                for i, a in enumerate(run.answers):
                    answers.setdefault((r.app, i), set()).add(a)
    return sum(len(v) == 1 for v in answers.values()), len(answers)


def write_policies_json(
    path: Path, meta: dict[str, Any], by_policy: dict[str, list[SettingResult]]
) -> None:
    data = {p: [x.to_json() for r in rs for x in r.per_app()] for p, rs in by_policy.items()}
    path.write_text(json.dumps({**meta, "policies": data}, indent=1))


def plot_policies(path: Path, by_policy: dict[str, list[SettingResult]], title: str) -> None:
    """Latency against offered load, one column per policy: mean (top) and p99 (bottom) per
    app, optimized solid and module by module dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(by_policy)
    fig, axes = plt.subplots(2, len(policies), figsize=(5 * len(policies), 7), squeeze=False,
                             sharey="row")  # fmt: skip
    cmap = plt.get_cmap("tab10")
    for col, policy in enumerate(policies):
        per_app = [x for r in by_policy[policy] if r.rate_qps is not None for x in r.per_app()]
        apps = list(dict.fromkeys(x.app for x in per_app))
        for row, (stat, label) in enumerate((("mean_ms", "mean"), ("p99_ms", "p99"))):
            ax = axes[row][col]
            for k, name in enumerate(apps):
                mine = sorted((x for x in per_app if x.app == name), key=lambda x: x.rate_qps)
                xs = [x.rate_qps for x in mine]
                for mode, style in zip(MODES, ("o-", "x--")):
                    ys = [getattr(x.runs[mode], stat) / 1e3 for x in mine]
                    ax.plot(xs, ys, style, color=cmap(k % 10),
                            label=f"{name}, {mode}" if col == 0 else None)  # fmt: skip
            ax.set_title(f"{policy}: {label} latency")
            ax.set_xlabel("offered load (queries/s, Poisson)")
            ax.set_ylabel(f"{label} latency (s)")
            ax.set_ylim(bottom=0)
    fig.legend(loc="lower center", ncol=4, fontsize=7)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_step_gantt(path: Path, steps: list[Any], run: Any, title: str) -> None:
    """The LLM engine's steps (``LLMEngine.record_steps``) of one run: one row per query (its
    arrival to its end as a thin grey line, a bar per step it had tokens in, coloured by query),
    and a top row with each step split by its queries' share of the step's tokens."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spans = {}  # query id -> (first enqueued, last end) on the same monotonic clock
    for trace in run.traces:
        for s in trace.spans:
            lo, hi = spans.get(s.query_id, (s.enqueued, s.end))
            spans[s.query_id] = (min(lo, s.enqueued), max(hi, s.end))
    queries = sorted(spans)
    t0 = min([lo for lo, _ in spans.values()] + [st.start for st in steps])
    app_of = {
        q: run.apps[i] for i, t in enumerate(run.traces) for q in {s.query_id for s in t.spans}
    }
    cmap = plt.get_cmap("tab20")
    color = {q: cmap(i % 20) for i, q in enumerate(queries)}
    fig, ax = plt.subplots(figsize=(12, 0.32 * len(queries) + 2))
    rows = {q: i + 1 for i, q in enumerate(queries)}
    for q, (lo, hi) in spans.items():
        ax.plot([lo - t0, hi - t0], [rows[q]] * 2, color="0.75", lw=1, zorder=0)
    for st in steps:
        total = sum(n for _, n in st.chunks) or 1
        left = st.start - t0
        width = max(st.end - st.start, 1e-4)
        bottom = -0.4
        for q, n in st.chunks:
            share = n / total * 0.8
            c = color.get(q, "0.3")
            ax.bar(left, share, width, bottom=bottom, color=c, align="edge", linewidth=0)
            bottom += share
            if q in rows:
                ax.barh(rows[q], width, left=left, height=0.6, color=c, linewidth=0)
    labels = ["LLM step"] + [f"q{q} {app_of.get(q, '')}" for q in queries]
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_title(f"{title}: {len(steps)} steps", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
