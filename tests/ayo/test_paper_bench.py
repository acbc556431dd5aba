"""The paper's workload, the critical-path bound and the simulator's paper setting."""

from __future__ import annotations

import random

import pytest

from ayo.apps import APPS
from ayo.runtime.plan_cache import PlanCache
from ayo.scheduler.sim.simulation import run_virtual
from benchmarks import scheduler as scheduler_bench
from benchmarks.bound import WORKERS, Bound, busy_seconds, critical_path_bound
from benchmarks.e2e_core import MODES, run_serial, serial_bounds
from benchmarks.sim_paper import PAPER_PASSAGES, profile_set, sim_app, sim_queries
from benchmarks.workloads import CHUNK_WORDS, PaperShape, paper_workload, query_passages


def test_critical_path_bound_overlaps_what_streams_and_credits_the_early_prompt() -> None:
    """naive_rag with documents, after pruning and the prefill split: the passages' embedding
    streams into the ingest (they overlap), the question's search waits for the whole index,
    the prompt's early part runs from the start; the busiest worker and the cores bound too."""
    plan = PlanCache().for_inputs(
        APPS["naive_rag"],
        {"question": "q", "documents": ["a b"] * 20},
        frozenset({"prune", "split"}),
    )
    seconds = {
        "indexing.embed": 1.0,
        "indexing.ingest": 0.5,
        "retrieval.embed": 0.1,
        "retrieval.search": 0.05,
        "synthesis.prefill.partial": 0.02,
        "synthesis.prefill.full": 0.2,
        "synthesis.decode": 0.3,
    }
    bound = critical_path_bound(plan, seconds, WORKERS, cores=2)
    # ingest ends with the embedding (1.0); search 1.0-1.05; prefill 1.05-1.25; decode 1.55
    assert bound.path_s == pytest.approx(1.55)
    assert (bound.busiest, bound.resource_s) == ("embedder", pytest.approx(1.1))
    assert bound.cores_s == pytest.approx(sum(seconds.values()) / 2)
    assert (bound.seconds, bound.limit) == (pytest.approx(1.55), "path")
    # on one worker, the embedding and the ingest cannot overlap: 0.5 s later
    shared = critical_path_bound(plan, seconds, {**WORKERS, "index": "embedder"}, cores=2)
    assert shared.path_s == pytest.approx(2.05)
    one_core = critical_path_bound(plan, {**seconds, "indexing.embed": 3.0}, WORKERS, cores=1)
    assert one_core.limit == "cores" and one_core.seconds == pytest.approx(4.17)
    assert Bound(1.0, 2.0, 0.5, "llm").limit == "llm"


def test_busy_seconds_counts_overlapping_spans_of_a_node_once() -> None:
    class S:
        def __init__(self, node_id: str, start: float, end: float) -> None:
            self.node_id, self.start, self.end = node_id, start, end

    spans = [S("a", 0.0, 1.0), S("a", 0.5, 1.5), S("a", 2.0, 2.5), S("b", 1.0, 1.25)]
    assert busy_seconds(spans) == {"a": pytest.approx(2.0), "b": pytest.approx(0.25)}


def test_paper_workload_brings_the_gold_article_among_hundreds_of_passages() -> None:
    shape = PaperShape(passages=(300, 700), answer_tokens=10, contextual_passages=(12, 20))
    apps = ("naive_rag", "contextual_rag", "search_gen")
    workload, questions = paper_workload(apps, 3, seed=5, shape=shape)
    again, _ = paper_workload(apps, 3, seed=5, shape=shape)
    assert workload == again and workload.answer_tokens == 10  # seeded
    assert set(workload.documents) == {"naive_rag", "contextual_rag"}  # search_gen takes none
    for docs in workload.documents["naive_rag"]:
        assert 300 <= len(docs) <= 700 and len(set(docs)) > 0.9 * len(docs)
        assert all(len(p.split()) <= CHUNK_WORDS for p in docs)
    for docs in workload.documents["contextual_rag"]:
        assert 12 <= len(docs) <= 20
    from ayo.engines.corpus import load_wiki

    articles = load_wiki()
    gold = next(a for a in articles if a.title == questions[0].title)
    docs = query_passages(gold.title, (5, 5), random.Random(1), articles)
    assert len(docs) == 5 and gold.extract.split()[0] in " ".join(docs)
    assert workload.describe().startswith("workload paper: 3 questions, naive_rag 5")


def test_simulator_runs_every_app_of_the_paper_setting_within_its_bound() -> None:
    """Every app (search_gen's judge included) on the simulated paper-gpu engines with the
    paper's workload: answers equal in both modes, the optimized plan never slower than module
    by module, and no run faster than its critical-path bound."""

    async def main() -> list[tuple[str, float, float, float, int]]:
        out = []
        async with sim_app(profile_set("paper-gpu"), "paper") as app:
            for name in APPS:
                queries = sim_queries(name, "paper", 2, seed=3)
                r = await run_serial(app, name, queries)
                bounds = serial_bounds(app, r, queries, {}, cores=len(app.engines.proxies))
                opt, mbm = (r.runs[m] for m in MODES)
                for o, m, b in zip(opt.latencies_ms, mbm.latencies_ms, bounds):
                    out.append((name, o, m, b.seconds * 1e3, r.equal_answers))
        return out

    rows = run_virtual(main())
    assert {r[0] for r in rows} == set(APPS)
    for name, opt, mbm, bound, equal in rows:
        assert equal == 2, name
        assert opt <= mbm * 1.001, (name, opt, mbm)
        assert bound <= opt * 1.001 and bound <= mbm, (name, bound, opt, mbm)
    assert len(sim_queries("naive_rag", "paper", 1, 0)[0][1]["documents"]) == PAPER_PASSAGES


def test_scheduler_cli_prints_the_paper_table_and_the_ablation(capsys) -> None:
    scheduler_bench.main(["--profiles", "paper-gpu", "--workload", "paper", "--queries", "1",
                          "--apps", "advanced_rag,search_gen", "--ablate"])  # fmt: skip
    out = capsys.readouterr().out
    assert "2.03-2.09x" in out and "1.79x" in out and "bound / optimized" in out
    assert "all but decompose" in out and "llm: 20 ms + 0.2 ms/item + 0.35 ms/token" in out
    with pytest.raises(SystemExit):
        scheduler_bench.main(["--profiles", "gpu"])
