"""The LLM engine's step under the runtime's batching policy (``LLMEngine.set_step_order``).

The paper's two-query example: query 1 has primitives A (depth 3) and B (depth 2), query 2 has
G (depth 3), queued in the order A, B, G, and the step's token budget fits two prefills.
Arrival order runs A with B; ``depth`` runs A with G (each query moves along its longest path);
``critical_path`` runs the two primitives on their queries' critical paths, A and G.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from ayo.engines.llm import LLMEngine, SamplingParams
from ayo.engines.llm.block_manager import BlockManager
from ayo.engines.llm.commands import Open, Prefill
from ayo.engines.llm.scheduler import Scheduler
from ayo.engines.llm.sequence import SeqStatus, Sequence
from ayo.scheduler.batching.policies import PendingRequest, make_order, sequence_order

PROMPT = 8  # tokens per prefill; the step budget fits two


def paper_example() -> list[tuple[str, PendingRequest]]:
    # query 1's critical path is 300 ms (A on it, B with slack); query 2's is 200 ms (G)
    return [
        ("A", PendingRequest(1, "A", depth=3, remaining_ms=300, query_remaining_ms=300, seq=0)),
        ("B", PendingRequest(1, "B", depth=2, remaining_ms=100, query_remaining_ms=300, seq=1)),
        ("G", PendingRequest(2, "G", depth=3, remaining_ms=200, query_remaining_ms=200, seq=2)),
    ]


def steps_of(peer, policy: str | None) -> list[list[str]]:
    """Prefill A, B, G (in that order) on an engine whose step fits two prompts; the names of
    the sequences in each step."""
    eng = LLMEngine.from_model(
        peer.path, block_size=4, num_blocks=64, max_model_len=64,
        max_num_batched_tokens=2 * PROMPT,
    )  # fmt: skip
    if policy is not None:
        eng.set_step_order(sequence_order(make_order(policy), time.monotonic))
    core, names, steps = eng._core, {}, []
    real = core.runner.run

    def run(chunks):
        steps.append([names[c.seq.seq_id] for c in chunks])
        return real(chunks)

    core.runner.run = run
    for sid, (name, info) in enumerate(paper_example()):
        names[sid] = name
        core.handle(Open(sid))
        core.handle(Prefill(sid, list(range(10 + sid, 10 + sid + PROMPT)), info=info))
    while core.has_work:
        core.step()
    return steps


@pytest.mark.parametrize(
    "policy, first",
    [
        (None, {"A", "B"}),
        ("fcfs", {"A", "B"}),
        ("depth", {"A", "G"}),
        ("critical_path", {"A", "G"}),
    ],
)
def test_the_papers_two_query_example_inside_the_llm_step(tiny_llama, policy, first):
    steps = steps_of(tiny_llama, policy)
    assert set(steps[0]) == first
    assert sorted(n for s in steps for n in s) == ["A", "B", "G"]  # each computed once


def test_the_step_log_names_each_steps_queries_and_tokens(tiny_llama):
    eng = LLMEngine.from_model(
        tiny_llama.path, block_size=4, num_blocks=64, max_model_len=64,
        max_num_batched_tokens=2 * PROMPT,
    )  # fmt: skip
    eng.set_step_order(sequence_order(make_order("depth"), time.monotonic))
    records = eng.record_steps()
    core = eng._core
    for sid, (_, info) in enumerate(paper_example()):
        core.handle(Open(sid))
        core.handle(Prefill(sid, list(range(10 + sid, 10 + sid + PROMPT)), info=info))
    while core.has_work:
        core.step()
    assert [r.chunks for r in records] == [((1, PROMPT), (2, PROMPT)), ((1, PROMPT),)]
    assert all(r.start <= r.end for r in records)
    assert eng.record_steps(False) is records and core.step_log is None


def test_a_waiting_sequence_takes_the_blocks_of_a_lower_ranked_running_one():
    def scheduler(order):
        bm = BlockManager(num_blocks=4, block_size=4, enable_prefix_caching=False)
        sched = Scheduler(bm, max_num_batched_tokens=64, max_num_seqs=8)
        sched.order = order
        low, high = Sequence(0, list(range(12))), Sequence(1, list(range(8)))
        sched.submit(low)
        assert [c.seq for c in sched.schedule().chunks] == [low]  # 3 of the 4 blocks
        low.num_computed_tokens = 8  # mid-prefill: still running, 4 tokens to go
        sched.submit(high)  # needs 2 blocks, 1 is free
        return sched, low, high

    sched, low, high = scheduler(None)  # arrival order: the running one goes on, high waits
    out = sched.schedule()
    assert [c.seq for c in out.chunks] == [low] and not out.preempted
    assert high.status == SeqStatus.WAITING

    rank = {1: 0, 0: 1}  # high first
    sched, low, high = scheduler(lambda seqs: sorted(seqs, key=lambda s: rank[s.seq_id]))
    out = sched.schedule()
    assert [c.seq for c in out.chunks] == [high] and out.preempted == [low]
    assert low.status == SeqStatus.WAITING and not low.block_table  # recomputed later
    assert sched.num_preemptions == 1


def test_an_order_keeps_outputs_equal_and_frees_everything(tiny_llama):
    """Under an order that reverses arrival, every sequence still gets transformers' tokens."""

    async def main():
        eng = LLMEngine.from_model(
            tiny_llama.path, block_size=4, num_blocks=128, max_model_len=256,
            max_num_batched_tokens=16,
        )  # fmt: skip
        eng.set_step_order(lambda seqs: sorted(seqs, key=lambda s: -s.seq_id))
        async with eng:
            results = await asyncio.gather(
                *(
                    eng.generate([p], SamplingParams(max_tokens=8, ignore_eos=True))
                    for p in tiny_llama.prompts
                )
            )
            assert [r.token_ids for (r,) in results] == [e[:8] for e in tiny_llama.expected]
            st = eng.stats()
            assert st.used_blocks == 0 and st.running == 0 and st.waiting == 0

    asyncio.run(main())


async def test_the_runtime_gives_each_llm_call_its_primitives_request_info(tiny_llama):
    """BatchedLLM under ``depth`` sets the engine's step order and hands each prefill and
    decode the calling primitive's depth and query."""
    from ayo.scheduler.batching.llm_proxy import BatchedLLM
    from ayo.scheduler.batching.request_info import RequestInfo

    class Facts:
        node_id, op, depth, remaining_ms = "gen", "decode", 4, 50.0

    class Query:
        deadline = None

        def remaining_ms(self):
            return 80.0

        def decoded(self, node_id, text):
            pass

    eng = LLMEngine.from_model(tiny_llama.path, block_size=4, num_blocks=64, max_model_len=64)
    async with eng:
        llm = BatchedLLM("llm", [eng], policy="depth")
        assert eng._core.scheduler.order is not None
        info = RequestInfo(7, Facts(), Query())
        seq = await llm.open()
        await llm.prefill(seq, tiny_llama.prompts[0], info=info)
        first = eng._core.seqs[seq.seq_id].info
        assert (first.query_id, first.node_id, first.depth, first.query_remaining_ms) == (
            7, "gen", 4, 80.0,
        )  # fmt: skip
        pieces = [p async for p in llm.decode(seq, SamplingParams(max_tokens=3), info=info)]
        assert len(pieces) == 3
        assert eng._core.seqs[seq.seq_id].info.seq > first.seq  # the decode's, arrived later
        await llm.close(seq)
    fcfs = LLMEngine.from_model(tiny_llama.path, block_size=4, num_blocks=8, max_model_len=32)
    BatchedLLM("llm", [fcfs], policy="fcfs")
    assert fcfs._core.scheduler.order is None  # fcfs: the engine's own arrival order


async def test_the_peers_benchmarks_recording_llm_takes_the_step_order_info(tiny_llama):
    """``benchmarks.peers`` wraps the LLM engine; under a policy its prefill and decode get
    ``info`` and still record each call."""
    from ayo.scheduler.batching.llm_proxy import BatchedLLM
    from benchmarks.peers import RecordingLLM

    eng = LLMEngine.from_model(tiny_llama.path, block_size=4, num_blocks=64, max_model_len=64)
    async with eng:
        recorder = RecordingLLM(eng)
        llm = BatchedLLM("llm", [recorder], policy="critical_path")
        seq = await llm.open()
        await llm.prefill(seq, tiny_llama.prompts[0], info=None)
        assert isinstance(eng._core.seqs[seq.seq_id].info, PendingRequest)
        async for _ in llm.decode(seq, SamplingParams(max_tokens=3), info=None):
            pass
        await llm.close(seq)
    (call,) = recorder.take_calls()
    assert call["prompt_ids"] == tiny_llama.prompts[0] and call["generated"] == 3
