"""Held (idle-gap) prefills of BatchedLLM: a PartialPrefill's tokens are computed when the LLM
instance is idle, or folded into the sequence's next prefill or decode when that comes first."""

from __future__ import annotations

import asyncio

from ayo.scheduler import DecodeParams
from ayo.scheduler.batching.engine_scheduler import EngineScheduler
from ayo.scheduler.batching.llm_proxy import BatchedLLM
from ayo.scheduler.batching.proxies import PrefillRunner
from ayo.scheduler.sim.fakes import FakeLLM

HEAD, TAIL = "system words and the question", "then the retrieved context"


async def _text(llm: BatchedLLM, seq: object) -> str:
    return "".join([p async for p in llm.decode(seq, DecodeParams(64))])


def _llm(
    engine: FakeLLM, scheduled: bool, on_batch=None
) -> tuple[BatchedLLM, list[EngineScheduler]]:
    if not scheduled:
        return BatchedLLM("llm", [engine], on_batch=on_batch), []
    sched = EngineScheduler(PrefillRunner(engine), "llm", on_batch=on_batch)
    sched.start()
    return BatchedLLM("llm", [engine], [sched], on_batch=on_batch), [sched]


async def _check_idle_gap(scheduled: bool) -> None:
    engine = FakeLLM()
    llm, scheds = _llm(engine, scheduled)
    head, tail = engine.tokenizer.encode(HEAD), engine.tokenizer.encode(TAIL)
    seq = await llm.open()
    llm.prefill_when_idle(seq, head)  # idle: issued at once
    await asyncio.sleep(0.01)
    assert engine.prefill_calls == [len(head)]
    await llm.prefill(seq, tail)
    assert engine.prefill_calls == [len(head), len(tail)]
    assert await _text(llm, seq) == FakeLLM().answer(engine.tokenizer.decode(head + tail))
    await llm.close(seq)
    for s in scheds:
        await s.stop()


async def test_held_prefill_runs_in_an_idle_gap() -> None:
    await _check_idle_gap(scheduled=False)
    await _check_idle_gap(scheduled=True)


async def test_busy_llm_folds_held_tokens_into_the_next_prefill() -> None:
    engine = FakeLLM()
    records: list = []  # finished prefill batches and decodes
    llm, scheds = _llm(engine, scheduled=True, on_batch=records.append)
    head, tail = engine.tokenizer.encode(HEAD), engine.tokenizer.encode(TAIL)
    other = await llm.open()
    first = engine.tokenizer.encode("another query")
    await llm.prefill(other, first)
    running = llm.decode(other, DecodeParams(64))
    await running.__anext__()  # a decode is running: the instance is busy
    seq = await llm.open()
    llm.prefill_when_idle(seq, head)
    await asyncio.sleep(0.01)
    assert engine.prefill_calls == [len(first)]  # held, not issued
    await llm.prefill(seq, tail)  # one request: held tokens first, then the rest
    assert engine.prefill_calls == [len(first), len(head) + len(tail)]
    await asyncio.sleep(0)
    # the held primitive keeps its trace row: folded into the request that computed it
    prefills = [r for r in records if r.requests[0].payload is not None]
    folded = [x for r in prefills for x in r.primitives if x not in r.requests]
    assert len(folded) == 1 and folded[0].tokens == len(head)
    assert [len(r.requests) for r in prefills] == [1, 1]  # the other query's, then this one
    rest = [p async for p in running]
    assert rest  # the other query's decode went on undisturbed
    assert await _text(llm, seq) == FakeLLM().answer(engine.tokenizer.decode(head + tail))
    await llm.close(other)
    await llm.close(seq)
    await scheds[0].stop()


async def test_held_tokens_issue_when_the_llm_frees_up_and_before_a_decode() -> None:
    engine = FakeLLM()
    llm, scheds = _llm(engine, scheduled=True)
    head = engine.tokenizer.encode(HEAD)
    other = await llm.open()
    running = llm.decode(other, DecodeParams(64))
    await running.__anext__()
    a, b = await llm.open(), await llm.open()
    llm.prefill_when_idle(a, head)
    llm.prefill_when_idle(b, head[:3])
    await asyncio.sleep(0.01)
    assert engine.prefill_calls == []
    async for _ in running:  # the decode ends: both held prefills are issued
        pass
    await asyncio.sleep(0.01)
    assert sorted(engine.prefill_calls) == [3, len(head)]
    c = await llm.open()
    llm.prefill_when_idle(c, head)
    # a decode with nothing else to prefill computes the held tokens first
    assert await _text(llm, c) == FakeLLM().answer(engine.tokenizer.decode(head))
    for s in (other, a, b, c):
        await llm.close(s)
    await scheds[0].stop()


async def test_closing_a_sequence_drops_its_held_tokens() -> None:
    engine = FakeLLM()
    llm, scheds = _llm(engine, scheduled=True)
    other = await llm.open()
    running = llm.decode(other, DecodeParams(64))
    await running.__anext__()
    seq = await llm.open()
    llm.prefill_when_idle(seq, engine.tokenizer.encode(HEAD))
    await llm.close(seq)  # a cancelled query: nothing is computed for it
    async for _ in running:
        pass
    await asyncio.sleep(0.01)
    assert engine.prefill_calls == [] and engine.open_sequences == 1
    await llm.close(other)
    await scheds[0].stop()


async def test_app_holds_partial_prefills_for_an_idle_gap(monkeypatch) -> None:
    """The PartialPrefill handler goes through ``prefill_when_idle`` (not a plain prefill), and
    the optimized plan still answers as the module-by-module one, with a trace row per primitive."""
    from ayo.app import App

    held: list[int] = []
    original = BatchedLLM.prefill_when_idle

    def spy(self: BatchedLLM, seq: object, tokens: list[int]) -> None:
        held.append(len(tokens))
        original(self, seq, tokens)

    monkeypatch.setattr(BatchedLLM, "prefill_when_idle", spy)
    inputs = {"question": "why is the sky blue"}
    async with App.fake() as app:
        plan = app.plan("naive_rag", inputs)
        partial = [n.id for n in plan.nodes if n.op.value == "PartialPrefill"]
        optimized = await app.run("naive_rag", inputs)
        reference = await app.run("naive_rag", inputs, optimize=False)
    assert partial and len(held) == len(partial) and all(n > 0 for n in held)
    assert optimized.outputs == reference.outputs
    assert set(partial) <= {s.node_id for s in optimized.trace.spans}
