"""The end-to-end benchmark's loop and outputs on the deterministic fake engines (no models)."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import statistics

import pytest

from ayo.runtime.app import App
from benchmarks import e2e
from benchmarks.e2e_core import MODES, Plan, percentile, poisson_arrivals, run_all
from benchmarks.e2e_report import HEADERS, policy_table, table_rows
from benchmarks.workloads import fanoutqa_questions


def test_percentile_matches_statistics_quantiles():
    rng = random.Random(3)
    xs = [rng.uniform(0, 100) for _ in range(37)]
    # statistics' "inclusive" method is the same linear interpolation between order statistics
    cuts = statistics.quantiles(xs, n=100, method="inclusive")
    assert percentile(xs, 50) == pytest.approx(statistics.median(xs))
    assert percentile(xs, 99) == pytest.approx(cuts[98])
    assert percentile([5.0], 99) == 5.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_poisson_arrivals_are_seeded_with_the_requested_mean_gap():
    a = poisson_arrivals(4000, rate_qps=2.0, seed=7)
    assert a == poisson_arrivals(4000, rate_qps=2.0, seed=7)
    assert a != poisson_arrivals(4000, rate_qps=2.0, seed=8)
    gaps = [y - x for x, y in itertools.pairwise(a)]
    assert a[0] == 0.0 and min(gaps) > 0
    assert statistics.fmean(gaps) == pytest.approx(0.5, rel=0.05)
    with pytest.raises(ValueError):
        poisson_arrivals(3, 0.0, 0)


async def test_core_loop_on_fakes_gives_equal_answers_and_a_full_table():
    questions = tuple(fanoutqa_questions(3, seed=1))
    assert len(set(questions)) == 3 and all(q.endswith("?") for q in questions)
    plan = Plan(("naive_rag", "advanced_rag"), questions, (0.5, 2.0), seed=1)
    async with App.fake(delay_s=0.001) as app:
        results = await run_all(app, plan)
    assert [(r.app, r.rate_qps is None) for r in results] == [
        ("naive_rag", True), ("naive_rag", False), ("naive_rag", False),
        ("advanced_rag", True), ("advanced_rag", False), ("advanced_rag", False),
    ]  # fmt: skip
    for r in results:
        assert set(r.runs) == set(MODES)
        assert all(r.runs[m].n == 3 for m in MODES)
        # deterministic fakes: every pass keeps the answer, under any batching
        assert r.equal_answers == 3 and r.differing() == []
        assert r.runs[MODES[0]].answers[0] != r.runs[MODES[0]].answers[1]
        assert r.speedup == pytest.approx(r.runs[MODES[1]].mean_ms / r.runs[MODES[0]].mean_ms)
    # the two Poisson rates are the multiples of the module-by-module serial capacity
    serial = results[3].runs[MODES[1]].mean_ms
    assert results[4].rate_qps == pytest.approx(0.5e3 / serial)
    assert results[5].rate_qps == pytest.approx(2e3 / serial)
    rows = table_rows(results)
    assert len(rows) == 2 * len(results) and all(len(row) == len(HEADERS) for row in rows)
    assert rows[0][2] == MODES[0] and rows[1][2] == MODES[1] and rows[0][-1] == "3/3"


def test_cli_on_fakes_writes_table_json_plot_and_gantts(tmp_path, capsys):
    argv = ["--engines", "fake", "--fake-delay", "0", "--quick", "--rates", "4"]
    assert e2e.main([*argv, "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "speedup mean" in printed and "cores" in printed
    data = json.loads((tmp_path / "e2e.json").read_text())
    assert len(data["settings"]) == 4 and data["machine"]
    assert all(s["equal_answers"] == s["total"] == 2 for s in data["settings"])
    pictures = ["latency_vs_rate"] + [
        f"gantt_advanced_rag_{tag}_{mode}" for tag in ("serial", "poisson") for mode in MODES
    ]
    for name in pictures:
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    chrome = json.loads((tmp_path / "gantt_advanced_rag_serial_optimized.json").read_text())
    assert {e["name"] for e in chrome["traceEvents"]} >= {"expansion.decode", "rerank.rerank"}


def test_cli_mix_of_four_apps_under_two_policies_on_fakes(tmp_path, capsys):
    apps = "naive_rag,advanced_rag,search_gen,contextual_rag"
    argv = ["--engines", "fake", "--fake-delay", "0", "--questions", "4", "--rates",
            "2,4", "--max-tokens", "8", "--apps", apps, "--mix", "--policy", "fcfs,critical_path"]  # fmt: skip
    assert e2e.main([*argv, "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "fcfs opt" in printed and "critical_path mbm" in printed
    assert "answers equal across every policy, load and mode: 4/4 questions" in printed
    data = json.loads((tmp_path / "e2e.json").read_text())
    for policy in ("fcfs", "critical_path"):
        cells = data["policies"][policy]
        # serial + two rates, each split into the four apps (one question each)
        assert [c["app"] for c in cells] == apps.split(",") * 3
        assert all(c["total"] == 1 and c["equal_answers"] == 1 for c in cells)
    fcfs, cp = (data["policies"][p] for p in ("fcfs", "critical_path"))
    assert [c["rate_qps"] for c in fcfs] == [c["rate_qps"] for c in cp]  # the same offered rates
    assert (tmp_path / "latency_vs_rate.png").read_bytes()[:4] == b"\x89PNG"


def test_policy_table_adds_throughput_for_the_ray_setups(tmp_path):
    """The --ray table (one column per LLM setup, with throughput), from the same results the
    policy table reads; --ray refuses what it cannot compare."""
    plan = Plan(("naive_rag",), ("why do stars shine", "why do rivers flow"), (2.0,))
    results = asyncio.run(_run_fake(plan))
    headers, rows = policy_table({"1 local LLM": results, "1 local + 1 remote LLM": results},
                                 throughput=True)  # fmt: skip
    assert headers[2] == "1 local LLM opt: mean / p99 s, q/s"
    assert len(rows) == 2 and all(cell.count(", ") == 1 for cell in rows[1][2:6]), rows
    with pytest.raises(SystemExit):
        e2e.parse_args(["--ray", "--engines", "fake"])


async def _run_fake(plan: Plan) -> list:
    async with App.fake(0.0) as app:
        return await run_all(app, plan)


def test_step_gantt_draws_the_llm_steps_of_a_run(tmp_path):
    from ayo.engines.llm.core import StepRecord
    from ayo.runtime.tracing import Span, Trace
    from benchmarks.e2e_core import ModeRun
    from benchmarks.e2e_report import write_step_gantt

    traces = [
        Trace([Span(q, "synthesis.decode", "llm", 0.1 * q, 0.1 * q, 1.0 + q)]) for q in (1, 2)
    ]
    run = ModeRun(MODES[0], [1000.0, 1000.0], ["a", "b"], 2.0, traces, ["naive_rag", "search_gen"])
    steps = [StepRecord(0.2, 0.3, ((1, 64), (2, 1))), StepRecord(0.3, 0.35, ((1, 1), (None, 1)))]
    path = tmp_path / "steps.png"
    write_step_gantt(path, steps, run, "two queries")
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert run.only("search_gen").answers == ["b"] and run.only("search_gen").wall_s == 2.0


def test_cli_paper_workload_with_bounds_and_ablation_on_fakes(tmp_path, capsys):
    """--workload paper: each query brings its passages (the fakes index them), answers capped
    at 10 tokens; the serial table is followed by the critical-path bounds and the ablation."""
    argv = ["--engines", "fake", "--fake-delay", "0", "--quick", "--rates", "", "--workload",
            "paper", "--apps", "naive_rag,contextual_rag", "--ablate", "--out", str(tmp_path)]  # fmt: skip
    assert e2e.main(argv) == 0
    printed = capsys.readouterr().out
    assert "workload paper: 2 questions, naive_rag" in printed and "answers <= 10 tokens" in printed
    assert "best speedup" in printed and "all but decompose" in printed
    data = json.loads((tmp_path / "e2e.json").read_text())
    extras = data["extras"]["critical_path"]
    assert [len(extras["bounds"][app]) for app in ("naive_rag", "contextual_rag")] == [2, 2]
    for ablation in extras["ablation"]:
        runs = ablation["runs"]
        assert len(runs) == 10 and all(r["n"] == 2 for r in runs.values())
        baseline = runs["none (module by module)"]["answers"]
        assert all(r["answers"] == baseline for r in runs.values())  # every pass set agrees
    with pytest.raises(SystemExit):
        e2e.parse_args(["--passes", "prune,fuse"])
