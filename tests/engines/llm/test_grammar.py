"""Constrained decoding (structured output): every output of a random JSON schema parses and
validates, sampled at a high temperature by a random-weight model (so nothing but the grammar
keeps it valid); a grammar that allows the greedy tokens leaves SmolLM2's output unchanged; a
grammar survives preemption; a schema the library refuses fails the decode with its reason."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ayo.engines.llm import InvalidRequest, LLMEngine, SamplingParams
from ayo.engines.llm.sampling import Grammar

VOCAB = 49152  # SmolLM2's: the tokenizer's tokens are the model's logits


@pytest.fixture(scope="module")
def random_smol(tmp_path_factory):
    """A 2-layer random-weight Llama over SmolLM2's vocabulary and tokenizer: steps of a few
    milliseconds whose token choices no model knowledge makes valid."""
    import transformers as tf

    from ayo.runtime.defaults import default_tokenizer

    torch.manual_seed(0)
    config = tf.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=2,
    )
    path = tmp_path_factory.mktemp("random_smol")
    tf.LlamaForCausalLM(config).save_pretrained(path)
    default_tokenizer().hf.save_pretrained(path)
    return path


# JSON schemas whose every instance is short: bounded strings, integers, arrays and objects.
_leaf = st.one_of(
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.integers(0, 50).map(lambda lo: {"type": "integer", "minimum": lo, "maximum": lo + 99}),
    st.integers(1, 6).map(lambda n: {"type": "string", "maxLength": n}),
    st.lists(
        st.sampled_from(["red", "green", "a b", 'q"uote']), min_size=1, max_size=3, unique=True
    ).map(lambda xs: {"enum": xs}),
)


def _object(children):
    return st.dictionaries(
        st.from_regex(r"[a-z]{1,6}", fullmatch=True), children, min_size=1, max_size=3
    ).map(
        lambda props: {
            "type": "object",
            "properties": props,
            "required": sorted(props),
            "additionalProperties": False,
        }
    )


_schemas = st.recursive(
    _leaf,
    lambda children: st.one_of(
        _object(children),
        children.map(lambda items: {"type": "array", "items": items, "maxItems": 3}),
    ),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def engine_loop(random_smol):
    """One engine on the random model, on an event loop of its own that the examples reuse."""
    loop = asyncio.new_event_loop()
    llm = LLMEngine.from_model(random_smol, num_threads=1)
    loop.run_until_complete(llm.start())
    yield llm, loop
    loop.run_until_complete(llm.stop())
    loop.close()


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    schema=_schemas.filter(lambda s: s.get("type") in ("object", "array")),
    seed=st.integers(0, 1000),
)
def test_every_output_of_a_random_schema_parses_and_validates(engine_loop, schema, seed):
    llm, loop = engine_loop
    params = SamplingParams(
        max_tokens=200, temperature=1.5, seed=seed, grammar=Grammar.json_schema(schema)
    )
    for r in loop.run_until_complete(llm.generate(["a", "{", "Write JSON:"], params)):
        assert r.finish_reason == "stop", (schema, r.text)
        jsonschema.validate(json.loads(r.text), schema)


async def test_choice_regex_and_json_object_hold_under_sampling(random_smol):
    async with LLMEngine.from_model(random_smol, num_threads=1) as llm:
        prompts = [f"prompt {i}" for i in range(6)]
        choice = Grammar.choice(["alpha", "beta gamma", "δ"])
        for r in await llm.generate(prompts, SamplingParams(temperature=2.0, grammar=choice)):
            assert r.text in ("alpha", "beta gamma", "δ") and r.finish_reason == "stop"
        regex = Grammar.regex(r"[0-9]{3}-[a-z]{2}")
        for r in await llm.generate(prompts, SamplingParams(temperature=2.0, grammar=regex)):
            assert len(r.text) == 6 and r.text[:3].isdigit() and r.text[3] == "-", r.text
        obj = Grammar.json_object()
        params = SamplingParams(max_tokens=100, temperature=0.7, seed=3, grammar=obj)
        for r in await llm.generate(prompts[:2], params):
            if r.finish_reason == "stop":  # free JSON may outrun max_tokens
                assert isinstance(json.loads(r.text), dict), r.text


async def test_a_grammar_survives_preemption(random_smol):
    """Eight constrained decodes in a KV cache that holds few of them at once: sequences are
    preempted (their KV dropped and recomputed) mid-grammar, and every output still validates.
    (A sequence waiting to be readmitted holds no blocks: matched prefix blocks it kept used to
    pin the cache until the scheduler refused a sequence as never fitting.)"""
    schema = {
        "type": "array",
        "items": {"type": "integer", "minimum": 0, "maximum": 9},
        "minItems": 20,
        "maxItems": 20,
    }
    async with LLMEngine.from_model(
        random_smol, num_threads=1, num_blocks=24, block_size=8, max_num_seqs=8
    ) as llm:
        params = SamplingParams(
            max_tokens=70, temperature=1.0, seed=1, grammar=Grammar.json_schema(schema)
        )
        results = await llm.generate([f"list {i}:" for i in range(8)], params)
        assert llm.stats().preemptions > 0
    for r in results:
        assert r.finish_reason == "stop", r.text
        jsonschema.validate(json.loads(r.text), schema)


async def test_a_grammar_allowing_the_greedy_tokens_changes_nothing(smol):
    """SmolLM2's greedy answers, then the same decodes under a choice grammar that holds each
    answer (and a decoy): token for token the same."""
    async with LLMEngine(smol.model, smol.tokenizer) as llm:
        free = await llm.generate(smol.prompts, SamplingParams(max_tokens=12))
        for prompt, r in zip(smol.prompts, free):
            grammar = Grammar.choice([r.text, "Something else entirely"])
            # the choice ends where the free text ended: the decode stops there too, without
            # the end-of-sequence token the free decode spent a step on
            [c] = await llm.generate([prompt], SamplingParams(max_tokens=12, grammar=grammar))
            eos = set(smol.loaded.config.eos_token_ids)
            free_ids = r.token_ids[:-1] if r.token_ids[-1] in eos else r.token_ids
            assert c.token_ids == free_ids and c.text == r.text and c.finish_reason == "stop"


async def test_a_schema_the_library_refuses_fails_its_decode_alone(random_smol):
    async with LLMEngine.from_model(random_smol, num_threads=1) as llm:
        bad = SamplingParams(max_tokens=8, grammar=Grammar.json_schema({"type": "nonsense"}))
        good = SamplingParams(max_tokens=8)
        results = await asyncio.gather(
            llm.generate(["x"], bad), llm.generate(["y"], good), return_exceptions=True
        )
        assert isinstance(results[0], InvalidRequest) and "nonsense" in str(results[0])
        assert "file.cc" not in str(results[0]) and ".cc:" not in str(results[0])
        assert results[1][0].finish_reason == "length"
        # compiled once: the second ask is served from the cache
        assert llm.grammars.submit(Grammar.choice(["a"])).result() is llm.grammars.compile(
            Grammar.choice(["a"])
        )


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Grammar.json_schema("{not json"), "not JSON"),
        (lambda: Grammar.json_schema([1, 2]), "object"),
        (lambda: Grammar.choice([]), "non-empty"),
        (lambda: Grammar.regex(""), "non-empty"),
        (lambda: Grammar("yaml"), "kind"),
    ],
)
def test_malformed_grammars_are_refused_when_built(make, message):
    with pytest.raises(InvalidRequest, match=message):
        make()


def test_json_strings_never_take_a_raw_control_character():
    """JSON forbids U+0000-U+001F unescaped; xgrammar's rule for a string with ``maxLength``
    takes them (the random schemas found ``".\\x19"``; 26 such tokens allowed here), so the
    compiled JSON grammars mask every token holding one."""
    from ayo.engines.llm.grammar import GrammarCompiler, GrammarMatcher, allocate_bitmask
    from ayo.runtime.defaults import default_tokenizer

    hf = default_tokenizer().hf
    compiler = GrammarCompiler(hf, VOCAB, frozenset({2}))
    bounded = Grammar.json_schema({"type": "string", "maxLength": 3})  # its own string rule
    matcher = GrammarMatcher(compiler.compile(bounded))
    matcher.accept(hf.convert_tokens_to_ids('"'))  # inside the string now
    bitmask = allocate_bitmask(1, VOCAB)
    matcher.fill(bitmask, 0)
    allowed = [j for j in range(VOCAB) if (int(bitmask[0, j // 32]) >> (j % 32)) & 1]
    pieces = [hf.decode([j]) for j in allowed]
    assert len(allowed) > 5000  # every token of at most 3 characters may go in it
    assert not [p for p in pieces if any(ord(c) < 0x20 for c in p)]
