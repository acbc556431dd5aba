"""Background (idle-gap) prefills: a PartialPrefill's tokens are computed by the LLM in a step with
nothing else to do, or with the sequence's next prefill or decode when that comes first. The
simulated LLM models it on a virtual clock, as the real engine does it (``engines/llm``; its own
test is in ``tests/engines/llm/test_engine_api.py``)."""

from __future__ import annotations

import asyncio

import pytest

from ayo.scheduler import LatencyModel, SamplingParams
from ayo.scheduler.batching.llm_proxy import BatchedLLM
from ayo.scheduler.sim.fakes import FakeLLM
from ayo.scheduler.sim.simulation import SimLLM, run_virtual

HEAD, TAIL = "system words and the question", "then the retrieved context"
LATENCY = LatencyModel(fixed_ms=10.0, per_item_ms=1.0, per_token_ms=0.5)


async def _text(llm, seq) -> str:
    return "".join([p.text async for p in llm.decode(seq, SamplingParams(16), info=None)])


def test_background_tokens_run_in_an_idle_step() -> None:
    async def main() -> None:
        llm = SimLLM(LATENCY)
        head, tail = llm.tokenizer.encode(HEAD), llm.tokenizer.encode(TAIL)
        seq = await llm.open()
        llm.prefill_when_idle(seq, head, info=None)  # idle: a background step after the grace
        await asyncio.sleep(0.05)
        assert (llm.background_steps, llm.steps) == (1, 0)
        t0 = asyncio.get_running_loop().time()
        await llm.prefill(seq, tail, info=None)  # only the tail is left to compute
        took = asyncio.get_running_loop().time() - t0
        assert took == pytest.approx(LATENCY.estimate_ms(1, len(tail)) / 1e3)
        assert await _text(llm, seq) == FakeLLM().answer(llm.tokenizer.decode(head + tail))[:80]

    run_virtual(main())


def test_a_busy_llm_folds_background_tokens_into_the_next_prefill() -> None:
    async def main() -> None:
        llm = SimLLM(LATENCY)
        head, tail = llm.tokenizer.encode(HEAD), llm.tokenizer.encode(TAIL)
        other = await llm.open()
        await llm.prefill(other, llm.tokenizer.encode("another query"), info=None)
        running = asyncio.ensure_future(_text(llm, other))  # 16 decode steps: always busy
        await asyncio.sleep(0)
        seq = await llm.open()
        llm.prefill_when_idle(seq, head, info=None)
        await asyncio.sleep(0.03)
        assert llm.background_steps == 0  # never idle: held
        await llm.prefill(seq, tail, info=None)  # one request: the held tokens, then the tail
        await running
        assert llm.background_steps == 0
        assert await _text(llm, seq) == FakeLLM().answer(llm.tokenizer.decode(head + tail))[:80]

    run_virtual(main())


def test_a_decode_takes_the_held_tokens_and_closing_drops_them() -> None:
    async def main() -> None:
        llm = SimLLM(LATENCY)
        head = llm.tokenizer.encode(HEAD)
        other = await llm.open()
        await llm.prefill(other, head, info=None)
        busy = asyncio.ensure_future(_text(llm, other))
        await asyncio.sleep(0)
        a, b = await llm.open(), await llm.open()
        llm.prefill_when_idle(a, head, info=None)
        llm.prefill_when_idle(b, head, info=None)
        await llm.close(b)  # a cancelled query: nothing is computed for it
        assert await _text(llm, a) == FakeLLM().answer(llm.tokenizer.decode(head))[:80]
        await busy
        await asyncio.sleep(0.05)
        assert llm.background_steps == 0 and llm.open_sequences == 2

    run_virtual(main())


async def test_app_sends_partial_prefills_to_the_background(monkeypatch) -> None:
    """The PartialPrefill handler goes through ``prefill_when_idle`` (not a plain prefill), and
    the optimized plan still answers as the module-by-module one, with a trace row per primitive."""
    from ayo.runtime.app import App

    held: list[int] = []
    original = BatchedLLM.prefill_when_idle

    def spy(self: BatchedLLM, seq: object, tokens: list[int], *, info: object) -> None:
        held.append(len(tokens))
        original(self, seq, tokens, info=info)

    monkeypatch.setattr(BatchedLLM, "prefill_when_idle", spy)
    # documents to index: the LLM is idle long enough for the prompt's early part
    inputs = {"question": "why is the sky blue", "documents": ["rivers and stars"] * 16}
    async with App.fake() as app:
        plan = app.plan("naive_rag", inputs)
        partial = [n.id for n in plan.nodes if n.op.value == "PartialPrefill"]
        optimized = await app.run("naive_rag", inputs)
        reference = await app.run("naive_rag", inputs, optimize=False)
    assert partial and len(held) == len(partial) and all(n > 0 for n in held)
    assert optimized.outputs == reference.outputs
    assert set(partial) <= {s.node_id for s in optimized.trace.spans}
