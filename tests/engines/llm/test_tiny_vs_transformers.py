"""Greedy token-for-token equality with transformers on tiny random Llama and Qwen2 (GQA)."""

from __future__ import annotations

import itertools

import pytest
import torch

from ayo.engines.llm import LLMEngine, SamplingParams

GREEDY32 = SamplingParams(max_tokens=32, ignore_eos=True)


def engine(peer, **config) -> LLMEngine:
    config.setdefault("block_size", 4)
    config.setdefault("num_blocks", 256)
    return LLMEngine.from_model(peer.path, **config)


@pytest.mark.parametrize("attention", ["matmul", "kernels"])
async def test_batched_mixed_lengths(tiny, attention):
    async with engine(tiny, attention=attention) as eng:
        results = await eng.generate(tiny.prompts, GREEDY32)
    assert [r.token_ids for r in results] == tiny.expected
    assert all(r.finish_reason == "length" for r in results)


async def test_mistral(tiny_mistral):
    async with engine(tiny_mistral, max_num_batched_tokens=16) as eng:
        results = await eng.generate(tiny_mistral.prompts, GREEDY32)
        assert eng.max_model_len == 128  # its sliding window
    assert [r.token_ids for r in results] == tiny_mistral.expected


async def test_one_at_a_time(tiny):
    async with engine(tiny) as eng:
        for prompt, expected in zip(tiny.prompts, tiny.expected):
            (result,) = await eng.generate(prompt, GREEDY32)
            assert result.token_ids == expected


@pytest.mark.parametrize("attention", ["matmul", "kernels"])
@pytest.mark.parametrize("chunk", [1, 7, 64])
async def test_chunked_prefill(tiny, chunk, attention):
    async with engine(tiny, max_num_batched_tokens=chunk, attention=attention) as eng:
        results = await eng.generate(tiny.prompts, GREEDY32)
    assert [r.token_ids for r in results] == tiny.expected


async def test_shared_prefix_from_prefix_cache(tiny, greedy):
    base = tiny.prompts[2]
    variants = [[*base[:40], 5, 6, 7], [*base[:36], 9]]
    expected = [greedy(tiny.hf, v, 32) for v in variants]
    async with engine(tiny) as eng:
        (first,) = await eng.generate(base, GREEDY32)
        assert first.num_cached_tokens == 0
        results = await eng.generate(variants, GREEDY32)
        assert eng.stats().prefix_cache_hit_rate > 0
    assert first.token_ids == tiny.expected[2]
    assert [r.num_cached_tokens for r in results] == [40, 36]  # whole 4-token blocks
    assert [r.token_ids for r in results] == expected


@pytest.mark.parametrize("splits", [(20,), (9, 30)])
async def test_prefill_in_parts_then_decode(tiny, splits):
    prompt, expected = tiny.prompts[2], tiny.expected[2]
    async with engine(tiny) as eng:
        seq = await eng.open()
        bounds = [0, *splits, len(prompt)]
        for a, b in itertools.pairwise(bounds):
            await eng.prefill(seq, prompt[a:b])
        ids = [p.token_id async for p in eng.decode(seq, GREEDY32)]
        await eng.close(seq)
    assert ids == expected


async def test_preemption_when_blocks_run_out(tiny_llama):
    # 3 sequences of up to 77 tokens need 3 x 20 blocks of 4; 36 blocks force preemption.
    async with engine(tiny_llama, num_blocks=36, enable_prefix_caching=False) as eng:
        results = await eng.generate(tiny_llama.prompts, GREEDY32)
        stats = eng.stats()
    assert stats.preemptions > 0
    assert [r.token_ids for r in results] == tiny_llama.expected
    assert stats.used_blocks == 0


async def test_score_matches_transformers_logprobs(tiny_llama):
    context = tiny_llama.prompts[1]
    candidates = [[3, 4, 5], [7], list(range(10, 30))]
    async with engine(tiny_llama, max_num_batched_tokens=8) as eng:
        seq = await eng.open(context)
        scores = await eng.score_tokens(seq, candidates)
        totals = await eng.score(seq, candidates)  # the protocol's: one log-prob per candidate
        await eng.close(seq)
    assert totals == pytest.approx([s.logprob for s in scores], abs=1e-5)
    for cand, score in zip(candidates, scores):
        with torch.inference_mode():
            logits = tiny_llama.hf(torch.tensor([context + cand])).logits[0].float()
        logp = torch.log_softmax(logits, -1)
        want = [logp[len(context) - 1 + j, t].item() for j, t in enumerate(cand)]
        assert score.token_ids == cand
        torch.testing.assert_close(
            torch.tensor(score.token_logprobs), torch.tensor(want), atol=1e-4, rtol=1e-4
        )


async def test_seeded_sampling_is_reproducible(tiny_llama):
    params = SamplingParams(
        max_tokens=16, temperature=0.8, top_k=50, top_p=0.9, seed=7, ignore_eos=True
    )
    async with engine(tiny_llama) as eng:
        a = await eng.generate(tiny_llama.prompts, params)
        b = await eng.generate(tiny_llama.prompts[::-1], params)
    assert [r.token_ids for r in a] == [r.token_ids for r in b[::-1]]
    assert [r.token_ids for r in a] != tiny_llama.expected  # it really sampled


@pytest.mark.parametrize("num_blocks", [256, 12])  # 12 blocks of 4: the scorers queue for blocks
async def test_score_shared_candidate_prefixes(tiny_llama, num_blocks):
    """Candidates sharing a long prefix: no candidate log-prob may come from another one's
    cached blocks (the later ones find the earlier ones' blocks in the prefix cache)."""
    context = tiny_llama.prompts[0]  # 3 tokens: shorter than one block
    stem = list(range(40, 56))
    candidates = [[*stem, 1], [*stem, 2], [*stem, 3, 4]]
    async with engine(tiny_llama, num_blocks=num_blocks, max_num_batched_tokens=8) as eng:
        seq = await eng.open(context)
        scores = await eng.score_tokens(seq, candidates)
        await eng.close(seq)
        assert eng.stats().used_blocks == 0
    for cand, score in zip(candidates, scores):
        with torch.inference_mode():
            logits = tiny_llama.hf(torch.tensor([context + cand])).logits[0].float()
        logp = torch.log_softmax(logits, -1)
        want = [logp[len(context) - 1 + j, t].item() for j, t in enumerate(cand)]
        torch.testing.assert_close(
            torch.tensor(score.token_logprobs), torch.tensor(want), atol=1e-4, rtol=1e-4
        )
