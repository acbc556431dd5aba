"""Pass behaviour beyond the golden plans: profile-driven decisions, errors, fixed point."""

import pytest

from ayo.apps import APPS
from ayo.passes import (
    DEFAULT_PASSES,
    PASSES,
    CompileContext,
    Pass,
    PassManager,
    compile_workflow,
    pass_set,
)
from ayo.passes.prefill_split import idle_window_ms
from ayo.passes.stage import micro_batches
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
    [(64, 128, 171), (8, 128, 171), (256, 128, 256), (600, 128, None), (8, 16, None)],
)
def test_stage_decomposition_follows_efficient_batch(
    batch: int, documents: int, micro: int | None
) -> None:
    """Micro-batches of at least the efficient batch, as many as pay for their fixed costs (the
    embedder's 1 ms and the ingest's 0.5 ms against its 0.02 ms per item, default profiles):
    three for 512 chunks, none for 64."""
    shape = InputShape.from_sizes(question=1, documents=documents)
    ctx = CompileContext(profiles={"embedder": EngineProfile(efficient_batch=batch)}, shape=shape)
    plan = compile_workflow(APPS["naive_rag"].workflow(shape), ctx)
    # chunk_documents estimates 4 chunks per document (bucketed): 16 docs -> 64 chunks.
    assert plan.node("indexing.embed").config.micro_batch == (micro or 0)


def test_micro_batch_count_weighs_overlap_against_fixed_costs() -> None:
    # the profile measured on a 2-core CPU: embedder 13.9 ms a batch, index 12.4 + 1.57 ms an item
    assert micro_batches(320, 13.9, [(12.4, 1.57)], 16) == 4  # ~80 a batch, not 20 of 16
    assert micro_batches(320, 13.9, [(12.4, 0.0)], 16) == 1  # nothing to overlap
    assert micro_batches(320, 500.0, [(500.0, 1.0)], 16) == 1  # fixed costs eat the gain
    assert micro_batches(24, 1.0, [(1.0, 10.0)], 16) == 1  # not two efficient batches
    assert micro_batches(64, 0.0, [(0.0, 1.0)], 16) == 4  # free batches: as many as allowed


def test_llm_maps_are_not_cut_into_micro_batches() -> None:
    """The LLM batches every sequence in flight: micro-batches of a map would only add steps."""
    shape = InputShape.from_sizes(question=1, documents=64)
    ctx = CompileContext(profiles={"llm": EngineProfile(efficient_batch=2)}, shape=shape)
    plan = compile_workflow(APPS["contextual_rag"].workflow(shape), ctx)
    assert plan.node("indexing.context_prefill").config.micro_batch == 0
    assert plan.node("indexing.context_decode").config.micro_batch == 0


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


def test_named_passes_compile_an_ablation() -> None:
    """``optimize`` names the passes to run: none is module by module, all four is the default
    plan, one alone does only its rewrite; an unknown name is refused with the known ones."""
    wf = APPS["advanced_rag"].workflow(SHAPE)
    ctx = CompileContext(shape=SHAPE)
    assert compile_workflow(wf, ctx, optimize=frozenset()) == compile_workflow(wf, ctx, False)
    assert compile_workflow(wf, ctx, optimize=frozenset(PASSES)) == compile_workflow(wf, ctx)
    unoptimized = compile_workflow(wf, ctx, optimize=False)
    split = compile_workflow(wf, ctx, optimize=frozenset({"split"}))
    assert "PartialPrefill" in ops(split) and "PartialDecode" not in ops(split)
    assert len(split.edges) > len(unoptimized.edges)  # the control edges are still there
    pipelined = compile_workflow(wf, ctx, optimize=frozenset({"pipeline"}))
    assert "PartialDecode" in ops(pipelined) and "PartialPrefill" not in ops(pipelined)
    with pytest.raises(ValueError, match="unknown passes \\['fuse'\\]; the passes are prune"):
        pass_set(["prune", "fuse"])


def test_prefill_split_needs_idle_llm_time_before_the_late_inputs() -> None:
    """search_gen's answer waits for its judge (an LLM call) and a keyword search of under a
    millisecond: on an LLM that is also the judge there is no idle time for the early part, so
    no split; on a judge of its own the answer's LLM is idle while the judge works."""
    shape = InputShape.from_sizes(question=1)
    wf = APPS["search_gen"].workflow(shape)
    shared = compile_workflow(wf, CompileContext(shape=shape, resources={"judge": "llm"}))
    own = compile_workflow(wf, CompileContext(shape=shape))
    assert "PartialPrefill" not in ops(shared) and "Prefill" in ops(shared)
    assert ops(own).count("PartialPrefill") == 1
    window = idle_window_ms(own, {"context.coalesce"}, "llm", CompileContext(shape=shape))
    assert window > idle_window_ms(
        own, {"context.coalesce"}, "llm", CompileContext(shape=shape, resources={"judge": "llm"})
    )
