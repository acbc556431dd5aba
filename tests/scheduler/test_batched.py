"""Batch runners merge the payloads of many queries into few engine calls and split results back;
a failing merged call fails only the faulty payload."""

import asyncio

import pytest

from ayo.engines.records import RerankRequest
from ayo.scheduler import SamplingParams
from ayo.scheduler.batching.llm_proxy import BatchedLLM, PooledSeq
from ayo.scheduler.batching.proxies import (
    EmbedRunner,
    IndexRunner,
    IngestCall,
    KeywordCall,
    KeywordRunner,
    RerankRunner,
    SearchCall,
)
from ayo.scheduler.sim.fakes import FakeEmbedder, FakeIndex, FakeLLM, FakeReranker, sample_corpus
from ayo.scheduler.sim.simulation import VirtualClockLoop, run_virtual


class PickyEmbedder(FakeEmbedder):
    """Raises for any call containing the text "poison"; records the texts of each call."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[str]] = []

    async def embed(self, texts, *, info=None):
        self.seen.append(list(texts))
        if "poison" in texts:
            raise ValueError("cannot embed poison")
        return await super().embed(texts)


async def test_embed_runner_merges_into_one_call_and_splits() -> None:
    engine = PickyEmbedder()
    payloads = [["a", "b"], ["c"], ["d", "e", "f"]]
    results = await EmbedRunner(engine).run_batch(payloads)
    assert engine.seen == [["a", "b", "c", "d", "e", "f"]]
    assert results == [await FakeEmbedder().embed(p) for p in payloads]


async def test_failed_merged_call_is_retried_in_halves() -> None:
    engine = PickyEmbedder()
    results = await EmbedRunner(engine).run_batch([["a"], ["poison"], ["b"]])
    assert engine.seen == [["a", "poison", "b"], ["a"], ["poison", "b"], ["poison"], ["b"]]
    assert isinstance(results[1], ValueError) and "poison" in str(results[1])
    assert results[0] == await FakeEmbedder().embed(["a"])
    assert results[2] == await FakeEmbedder().embed(["b"])


async def test_index_runner_groups_by_collection_and_k() -> None:
    class Counting(FakeIndex):
        log: list[tuple] = []

        async def search(self, collection, vectors, k, *, info=None):
            self.log.append((collection, len(vectors), k))
            return await super().search(collection, vectors, k)

    index = Counting(sample_corpus(10))
    reference = FakeIndex(sample_corpus(10))
    v = [[1.0] + [0.0] * 7, [0.0, 1.0] + [0.0] * 6]
    payloads = [
        SearchCall("default", v[:1], 2),
        IngestCall("extra", [sample_corpus(1)[0]], v[:1]),
        SearchCall("default", v, 2),
        SearchCall("default", v[1:], 3),
    ]
    results = await IndexRunner(index).run_batch(payloads)
    assert index.log == [("default", 3, 2), ("default", 1, 3)]
    assert results[0] == await reference.search("default", v[:1], 2)
    assert results[1] is None and len(index.collections["extra"]) == 1
    assert results[2] == await reference.search("default", v, 2)
    assert results[3] == await reference.search("default", v[1:], 3)


async def test_keyword_and_rerank_runners() -> None:
    from ayo.scheduler.sim.fakes import FakeKeywordIndex

    corpus = sample_corpus(12)
    kw = FakeKeywordIndex(corpus)
    out = await KeywordRunner(kw).run_batch([KeywordCall(["rivers"], 2), KeywordCall(["bread"], 2)])
    assert out == [await kw.search(["rivers"], 2), await kw.search(["bread"], 2)]

    class Broken(FakeReranker):
        batches: list[int] = []

        async def rerank(self, requests, *, info=None):
            self.batches.append(len(requests))
            if any(r.query == "bad" for r in requests):
                raise RuntimeError("reranker crashed")
            return await super().rerank(requests)

    good, bad = RerankRequest("good", corpus, 3), RerankRequest("bad", corpus, 3)
    engine = Broken()
    out = await RerankRunner(engine).run_batch([[good], [bad]])
    assert engine.batches == [2, 1, 1]  # one scorer batch for both, then each alone
    assert out[0] == await FakeReranker().rerank([good])
    assert isinstance(out[1], RuntimeError)


async def test_llm_pool_keeps_a_sequence_on_its_instance() -> None:
    a, b = FakeLLM(), FakeLLM()
    b.tokenizer = a.tokenizer  # instances of one model share the tokenizer
    llm = BatchedLLM("llm", [a, b])
    s1, s2 = await llm.open(), await llm.open()
    assert isinstance(s1, PooledSeq) and {s1.instance, s2.instance} == {0, 1}
    ids = llm.tokenizer.encode("hello there")
    await llm.prefill(s2, ids, info=None)
    text = "".join([p.text async for p in llm.decode(s2, SamplingParams(64), info=None)])
    assert text == FakeLLM().answer("hello there")
    await llm.close(s1)
    await llm.close(s2)
    assert a.open_sequences == b.open_sequences == llm.open_sequences == 0


def test_virtual_clock_jumps_to_timers_exactly() -> None:
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualClockLoop)
        t0 = loop.time()
        await asyncio.gather(asyncio.sleep(3600), asyncio.sleep(1.5))
        return t0, loop.time()

    t0, t1 = run_virtual(main())
    assert t1 - t0 == pytest.approx(3600.0)
