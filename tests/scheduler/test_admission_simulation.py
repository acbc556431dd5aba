"""Policy-ordered admission (bounded running decodes) and the simulated engines' latency model."""

import asyncio

import pytest

from ayo.scheduler import Doc, EngineProfile, LatencyModel, SamplingParams
from ayo.scheduler.batching.admission import Admission
from ayo.scheduler.batching.policies import PendingRequest
from ayo.scheduler.sim.fakes import FakeLLM
from ayo.scheduler.sim.simulation import SimEmbedder, SimLLM, run_virtual, sim_engines


def _req(query: int, node: str, depth: int = 0, remaining: float = 0.0) -> PendingRequest:
    return PendingRequest(query, node, depth=depth, remaining_ms=remaining,
                          query_remaining_ms=remaining)  # fmt: skip


async def _admitted_order(policy: str, requests: list[PendingRequest]) -> list[str]:
    gate = Admission("llm", 1, policy)
    await gate.acquire(_req(0, "holder"))
    order: list[str] = []

    async def one(r: PendingRequest) -> None:
        await gate.acquire(r)
        order.append(r.node_id)
        await asyncio.sleep(0)
        gate.release()

    tasks = [asyncio.create_task(one(r)) for r in requests]
    await asyncio.sleep(0)
    assert gate.waiting == len(requests) and gate.held == 1
    gate.release()
    await asyncio.gather(*tasks)
    assert gate.held == 0
    return order


async def test_admission_order_follows_the_policy() -> None:
    def reqs():
        return [
            _req(1, "late_shallow", 1, 50.0),
            _req(2, "deep", 3, 80.0),
            _req(3, "short", 2, 5.0),
        ]

    assert await _admitted_order("fcfs", reqs()) == ["late_shallow", "deep", "short"]
    # critical_path: least remaining work first (all on their query's critical path)
    assert await _admitted_order("critical_path", reqs()) == ["short", "late_shallow", "deep"]


async def test_cancelled_waiter_is_withdrawn_and_slots_are_not_lost() -> None:
    gate = Admission("llm", 1)
    await gate.acquire(_req(0, "holder"))
    waiter = asyncio.create_task(gate.acquire(_req(1, "w")))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert gate.waiting == 0
    gate.release()
    granted = asyncio.create_task(gate.acquire(_req(2, "g")))
    await asyncio.sleep(0)
    assert granted.done() and gate.held == 1
    with pytest.raises(ValueError, match="limit must be >= 1"):
        Admission("x", 0)


def test_sim_llm_shares_steps_between_running_sequences() -> None:
    latency = LatencyModel(fixed_ms=10.0, per_item_ms=1.0, per_token_ms=0.5)

    llm = SimLLM(latency)
    ids = llm.tokenizer.encode("why do stars shine")

    async def main() -> tuple[float, float, str]:
        loop = asyncio.get_running_loop()
        seqs = [await llm.open() for _ in range(2)]
        t0 = loop.time()
        await asyncio.gather(*(llm.prefill(s, ids) for s in seqs))
        t1 = loop.time()  # one step: 2 items and their prompt tokens
        params = SamplingParams(max_tokens=5)
        texts = await asyncio.gather(
            *(asyncio.ensure_future(_join(llm.decode(s, params))) for s in seqs)
        )
        return t1 - t0, loop.time() - t1, texts[0]

    prefill_s, decode_s, text = run_virtual(main())
    assert prefill_s == pytest.approx((10 + 2 * 1 + 2 * len(ids) * 0.5) / 1e3)
    assert decode_s == pytest.approx(5 * (10 + 2 * 1) / 1e3)  # 5 shared steps of 2 sequences
    assert text == FakeLLM().answer("why do stars shine")[:25]  # the fake's first 5 pieces


def test_sim_llm_decodes_without_gaps_while_background_work_waits() -> None:
    """A decode's steps follow each other: held background tokens of another sequence wait
    for the LLM to be idle, they never put an idle grace period between two decode steps (the
    real engine keeps decoding sequences running)."""
    latency = LatencyModel(fixed_ms=10.0, per_item_ms=1.0, per_token_ms=0.5)
    llm = SimLLM(latency)
    ids = llm.tokenizer.encode("why do stars shine")

    async def main() -> tuple[float, float, int]:
        loop = asyncio.get_running_loop()
        seq, other = await llm.open(), await llm.open()
        await llm.prefill(seq, ids)
        llm.prefill_when_idle(other, ids)
        t0 = loop.time()
        await _join(llm.decode(seq, SamplingParams(max_tokens=20)))
        decoded = loop.time() - t0
        while llm.background_steps == 0:  # then the LLM is idle: the held tokens go in
            await asyncio.sleep(1e-3)
        return decoded, loop.time() - t0, llm.background_steps

    decode_s, _, background = run_virtual(main())
    assert decode_s == pytest.approx(20 * (10 + 1) / 1e3)  # 20 steps of one sequence, no gaps
    assert background == 1


async def _join(stream) -> str:
    return "".join([p.text async for p in stream])


def test_sim_embedder_takes_its_modelled_time() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await SimEmbedder(LatencyModel(2.0, 1.5)).embed(["a", "b", "c"])
        return loop.time() - t0

    assert run_virtual(main()) == pytest.approx(6.5e-3)


def test_sim_index_ingests_at_its_own_cost() -> None:
    """A profile's ``index.Ingest`` entry (a copy) prices ingests, ``index`` (a scan) searches."""
    profiles = {
        "index": EngineProfile(latency=LatencyModel(1.0, 1.0)),
        "index.Ingest": EngineProfile(latency=LatencyModel(0.0, 0.01)),
    }
    index = sim_engines(profiles)["index"]

    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await index.ingest("q", [Doc(str(i), "x") for i in range(100)], [[1.0]] * 100)
        t1 = loop.time()
        await index.search("q", [[1.0]], 3)
        return t1 - t0, loop.time() - t1

    assert run_virtual(main()) == pytest.approx((1e-3, 2e-3))
