"""Repetition, frequency and presence penalties: against transformers' logits processor and
OpenAI's formula, and end to end against transformers' ``generate(repetition_penalty=...)``."""

from __future__ import annotations

import math

import pytest
import torch

from ayo.engines.llm import InvalidRequest, LLMEngine, SamplingParams
from ayo.engines.llm.decoding import apply_penalties


@pytest.mark.parametrize("penalty", [1.3, 0.7])
def test_repetition_penalty_matches_transformers_processor(penalty):
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 97, generator=g) * 4  # both signs
    ids = [5, 17, 17, 3, 96, 0, 5]
    want = RepetitionPenaltyLogitsProcessor(penalty)(torch.tensor([ids]), logits.clone())
    got = logits[0].clone()
    apply_penalties(got, SamplingParams(repetition_penalty=penalty), ids, ids[4:])
    torch.testing.assert_close(got, want[0], rtol=0, atol=0)


def test_frequency_and_presence_penalties_follow_openai_over_the_output_only():
    logits = torch.zeros(10)
    prompt, output = [1, 2, 3], [2, 2, 7]
    params = SamplingParams(frequency_penalty=0.5, presence_penalty=0.25)
    apply_penalties(logits, params, prompt + output, output)
    want = torch.zeros(10)
    want[2] -= 2 * 0.5 + 0.25  # twice in the output
    want[7] -= 0.5 + 0.25
    torch.testing.assert_close(logits, want)  # token 1 and 3: prompt only, untouched


@pytest.mark.parametrize(
    "field, value",
    [
        ("temperature", math.nan),
        ("temperature", math.inf),
        ("top_p", math.nan),
        ("repetition_penalty", 0.0),
        ("repetition_penalty", math.nan),
        ("frequency_penalty", 2.5),
        ("presence_penalty", math.nan),
        ("seed", 2**70),
        ("seed", -1),
        ("max_tokens", 2.5),
    ],
)
def test_sampling_params_refuse_what_the_engine_cannot_run(field, value):
    with pytest.raises(InvalidRequest, match=field):
        SamplingParams(**{field: value})


async def test_repetition_penalty_greedy_equals_transformers(tiny_llama):
    params = SamplingParams(max_tokens=24, ignore_eos=True, repetition_penalty=1.5)
    async with LLMEngine.from_model(tiny_llama.path, block_size=4, num_blocks=256) as eng:
        results = await eng.generate(tiny_llama.prompts, params)
    hf = tiny_llama.hf
    hf.generation_config.eos_token_id = None
    for prompt, result in zip(tiny_llama.prompts, results):
        with torch.inference_mode():
            out = hf.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                max_new_tokens=24,
                do_sample=False,
                repetition_penalty=1.5,
                pad_token_id=0,
            )
        assert list(result.token_ids) == out[0, len(prompt) :].tolist()
    # and the penalty changes what is generated, so the comparison above means something
    assert [list(r.token_ids) for r in results] != [e[:24] for e in tiny_llama.expected]


async def test_logprobs_are_the_models_own_against_transformers(tiny_llama):
    """Each piece's log-probability and top alternatives are transformers' log-softmax of the
    model's logits at that position: taken before the repetition penalty that steers the
    sampled tokens."""
    params = SamplingParams(max_tokens=6, ignore_eos=True, logprobs=3, repetition_penalty=1.5)
    prompt = tiny_llama.prompts[1]
    async with LLMEngine.from_model(tiny_llama.path, block_size=4, num_blocks=64) as eng:
        seq = await eng.open(prompt)
        pieces = [p async for p in eng.decode(seq, params)]
        plain = [p async for p in eng.decode(await eng.open(prompt), SamplingParams(max_tokens=2))]
    assert plain[0].logprobs is None  # not asked: not computed
    ids = prompt + [p.token_id for p in pieces]
    with torch.inference_mode():
        logits = tiny_llama.hf(torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    for k, piece in enumerate(pieces):
        row = logp[len(prompt) - 1 + k]
        assert piece.logprobs.logprob == pytest.approx(float(row[piece.token_id]), abs=1e-4)
        values, top = row.topk(3)
        assert [t for t, _ in piece.logprobs.top] == top.tolist()
        assert [v for _, v in piece.logprobs.top] == pytest.approx(values.tolist(), abs=1e-4)


@pytest.mark.parametrize("value", [-1, 21, 2.0, True])
def test_logprobs_out_of_range_are_refused(value):
    with pytest.raises(InvalidRequest, match="logprobs"):
        SamplingParams(logprobs=value)
