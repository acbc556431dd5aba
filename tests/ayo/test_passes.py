"""Pass behaviour beyond the golden plans: profile-driven decisions, errors, fixed point."""

import pytest

from ayo.apps import APPS
from ayo.passes import DEFAULT_PASSES, CompileContext, Pass, PassManager, compile_workflow
from ayo.scheduler import EngineProfile, Op, PassError, StreamError, plan_to_json
from ayo.workflow import InputShape, lower

SHAPE = InputShape.from_sizes(question=1, documents=16)


def ops(plan) -> list[str]:
    return sorted(n.op.value for n in plan.nodes)


def test_prefill_split_threshold_comes_from_the_profile() -> None:
    wf = APPS["naive_rag"].workflow(SHAPE)
    low = compile_workflow(
        wf,
        CompileContext(
            profiles={"llm": EngineProfile(prefill_split_min_tokens=10_000)}, shape=SHAPE
        ),
    )
    assert "PartialPrefill" not in ops(low) and "Prefill" in ops(low)
    high = compile_workflow(
        wf, CompileContext(profiles={"llm": EngineProfile(prefill_split_min_tokens=1)}, shape=SHAPE)
    )
    assert ops(high).count("PartialPrefill") == 1 and "Prefill" not in ops(high)
    partial = high.node("synthesis.prefill.partial").config
    assert partial.prompt.template[partial.split_at :].startswith("{context}")


@pytest.mark.parametrize(
    ("batch", "documents", "micro"),
    [(64, 16, None), (32, 16, 32), (8, 16, 8), (32, 2, None), (4, 3, 4)],
)
def test_stage_decomposition_follows_efficient_batch(
    batch: int, documents: int, micro: int | None
) -> None:
    shape = InputShape.from_sizes(question=1, documents=documents)
    ctx = CompileContext(profiles={"embedder": EngineProfile(efficient_batch=batch)}, shape=shape)
    plan = compile_workflow(APPS["naive_rag"].workflow(shape), ctx)
    # chunk_documents estimates 4 chunks per document (bucketed): 16 docs -> 64 chunks.
    assert plan.node("indexing.embed").config.micro_batch == (micro or 0)


def test_no_decode_pipelining_without_a_consumer_that_takes_items() -> None:
    plan = compile_workflow(APPS["search_gen"].workflow(InputShape.from_sizes(question=1)))
    assert "PartialDecode" not in ops(plan)  # the judge writes text, not a list
    plan = compile_workflow(APPS["advanced_rag"].workflow(InputShape.from_sizes(question=1)))
    assert plan.node("expansion.decode").op == Op.PARTIAL_DECODE


def test_a_failing_pass_names_itself_and_the_node() -> None:
    def explode(plan, node, ctx):
        if node.op == Op.RERANK:
            raise ValueError("cannot handle this")
        return None

    plan = lower(APPS["advanced_rag"].workflow(SHAPE))
    with pytest.raises(
        PassError, match=r"\[exploding\] node 'rerank.rerank': ValueError: cannot handle this"
    ):
        PassManager([Pass("exploding", explode)]).run(plan, CompileContext(shape=SHAPE))


def test_a_pass_producing_an_invalid_plan_is_caught_by_validation() -> None:
    from ayo.scheduler import EdgeKind

    def bad_stream(plan, node, ctx):
        if node.op != Op.RERANK:
            return None
        edges = tuple(
            e.with_(kind=EdgeKind.STREAM) if e.dst == node.id and e.dst_port == "docs" else e
            for e in plan.edges
        )
        return plan.replace_parts(plan.nodes, edges)

    plan = lower(APPS["advanced_rag"].workflow(SHAPE))
    with pytest.raises(StreamError, match=r"\[bad_stream\] node 'rerank.fuse'"):
        PassManager([Pass("bad_stream", bad_stream)]).run(plan, CompileContext(shape=SHAPE))


def test_pass_manager_stops_at_a_fixed_point_and_detects_oscillation() -> None:
    ctx = CompileContext(shape=SHAPE)
    plan = compile_workflow(APPS["contextual_rag"].workflow(SHAPE), ctx)
    assert PassManager(DEFAULT_PASSES).run(plan, ctx) == plan  # optimizing twice changes nothing

    def rename(p, node, c):
        return p.replace_parts(tuple(reversed(p.nodes)), p.edges) if node.op == Op.INPUT else None

    with pytest.raises(PassError, match="no fixed point after 3 rounds"):
        PassManager([Pass("flip", rename)], max_rounds=3).run(plan, ctx)


def test_passes_are_pure() -> None:
    ctx = CompileContext(shape=SHAPE)
    lowered = lower(APPS["advanced_rag"].workflow(SHAPE))
    snapshot = plan_to_json(lowered)
    for p in DEFAULT_PASSES:
        p(lowered, ctx)
    assert plan_to_json(lowered) == snapshot
