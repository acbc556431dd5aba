"""Quantized weights (``engines/llm/quant.py``): the GGUF's own blocks, each linear against its
dequantized torch reference, the formats' resolution, and SmolLM2 in each format against
transformers in float32."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ayo.engines.llm import EngineConfig, InvalidRequest, LLMEngine
from ayo.engines.llm import config as cfg
from ayo.engines.llm.model import LlamaModel
from ayo.engines.llm.quant import (
    GROUP,
    Blocks,
    Int4Linear,
    Int8Linear,
    gguf_blocks,
    quantize,
)


def q4_1_bytes(d: np.ndarray, m: np.ndarray, q: np.ndarray) -> np.ndarray:
    """GGUF Q4_1 rows: per block fp16 d, fp16 m, 16 bytes (low nibbles: values 0-15)."""
    rows, nblocks = d.shape
    out = np.zeros((rows, nblocks, 20), np.uint8)
    out[..., 0:2] = d.astype(np.float16)[..., None].view(np.uint8)
    out[..., 2:4] = m.astype(np.float16)[..., None].view(np.uint8)
    qb = q.reshape(rows, nblocks, GROUP).astype(np.uint8)
    out[..., 4:] = qb[..., :16] | (qb[..., 16:] << 4)
    return out.reshape(rows, -1)


def test_q4_1_blocks_read_and_repack_exactly():
    rng = np.random.default_rng(0)
    rows, cols = 48, 128
    d = rng.uniform(0.001, 0.02, (rows, cols // GROUP))
    m = rng.uniform(-0.1, 0.0, (rows, cols // GROUP))
    q = rng.integers(0, 16, (rows, cols))
    b = gguf_blocks(q4_1_bytes(d, m, q), "Q4_1")
    assert b.kind == "Q4_1" and torch.equal(b.q, torch.from_numpy(q).to(torch.uint8))
    d16 = torch.from_numpy(d.astype(np.float16)).float().repeat_interleave(GROUP, 1)
    m16 = torch.from_numpy(m.astype(np.float16)).float().repeat_interleave(GROUP, 1)
    exact = torch.from_numpy(q).float() * d16 + m16  # the format's own values
    assert torch.equal(b.dense(), exact)
    x = torch.randn(5, cols)
    # float32 scales hold the fp16 ones exactly: only the sum's rounding differs
    lin = Int4Linear.from_blocks(b)
    # the kernel's inputs and scales are bfloat16: its product is the format's values' to
    # within that rounding, and the dense copy (prefill) multiplies the exact values
    rounding = (x.abs() @ exact.abs().T) * 2**-7
    assert ((lin(x) - x @ exact.T).abs() <= rounding).all()
    assert torch.equal(
        Int4Linear.from_blocks(b).scale_zeros[..., 0].float().T, d16[:, ::GROUP].bfloat16().float()
    )
    order = torch.randperm(rows)
    assert torch.equal(b.rows(order).dense(), exact[order])


def test_q8_0_blocks_read_exactly():
    rng = np.random.default_rng(1)
    rows, cols = 8, 64
    d = rng.uniform(0.001, 0.02, (rows, cols // GROUP)).astype(np.float16)
    q = rng.integers(-127, 128, (rows, cols)).astype(np.int8)
    raw = np.zeros((rows, cols // GROUP, 34), np.uint8)
    raw[..., 0:2] = d[..., None].view(np.uint8)
    raw[..., 2:] = q.reshape(rows, -1, GROUP).view(np.uint8)
    b = gguf_blocks(raw.reshape(rows, -1), "Q8_0")
    want = torch.from_numpy(q).float() * torch.from_numpy(d).float().repeat_interleave(GROUP, 1)
    assert b.m is None and torch.equal(b.dense(), want)
    assert gguf_blocks(raw.reshape(rows, -1), "Q5_K") is None


@pytest.mark.parametrize("kind", ["int8", "int4"])
@pytest.mark.parametrize("rows", [1, 7, 64])
def test_quantized_linear_matches_its_weights(kind, rows):
    """Each linear against ``x @ w.T`` within the quantization's half step (int4: of the min/max
    grid) plus the bfloat16 rounding of its inputs; from ``dense_from`` rows on, the dense
    copy's exact product."""
    g = torch.Generator().manual_seed(2)
    w = torch.randn(96, 160, generator=g) * 0.05
    x = torch.randn(rows, 160, generator=g)
    lin = quantize(lambda: w, None, kind)
    assert isinstance(lin, Int8Linear if kind == "int8" else Int4Linear)
    bias = torch.randn(96, generator=g)
    out = lin(x, bias)
    assert out.dtype == torch.float32
    if kind == "int4":
        grid = w.reshape(96, -1, GROUP)
        step = (grid.amax(-1) - grid.amin(-1)) / 15
    else:
        step = (w.abs().amax(1) / 127)[:, None].expand(96, 160 // GROUP)
    # |w - w_q| <= step / 2 per weight, so |x @ (w - w_q).T| <= |x| @ step.T / 2
    bound = (x.abs().reshape(rows, -1, GROUP).sum(-1) @ step.T) / 2
    ref = x @ w.T + bias
    rounding = (x.abs() @ w.abs().T) * 2**-7  # bfloat16 inputs (and scales) at the kernel
    assert ((out - ref).abs() <= bound + rounding + 1e-4).all()
    assert lin.nbytes < w.numel() * 2  # fewer bytes than bfloat16
    lin.keep_dense(lambda x: x @ w.T, 4, w.nbytes)
    torch.testing.assert_close(lin(x, bias), ref if rows >= 4 else out)


def test_int4_without_a_group_multiple_takes_int8():
    w = torch.randn(16, 40)
    assert isinstance(quantize(lambda: w, None, "int4"), Int8Linear)
    blocks = Blocks("Q8_0", torch.zeros(16, 64, dtype=torch.int8), torch.ones(16, 2), None)
    lin = quantize(lambda: torch.randn(16, 64), blocks, "int4")
    assert isinstance(lin, Int4Linear)  # Q8_0 blocks are requantized from the dense values


def test_formats_resolve_and_refuse_mismatches(monkeypatch, tmp_path):
    assert (EngineConfig().dtype, EngineConfig().weights) == ("float32", "fp32")
    assert EngineConfig(dtype="bfloat16").weights == "bf16"
    assert EngineConfig(weights="int4").dtype == "float32"
    assert EngineConfig(dtype="bfloat16", weights="int8").format_key == "int8-bfloat16"
    with pytest.raises(InvalidRequest, match="bf16 weights are dense bfloat16"):
        EngineConfig(dtype="float32", weights="bf16")
    with pytest.raises(InvalidRequest, match="weights must be 'auto' or one of"):
        EngineConfig(weights="q4_k")
    # auto: the fastest measured, measured once per CPU, threads and torch, then read back
    monkeypatch.setenv("AYO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("ayo.engines.llm.attention.native_bf16_matmul", lambda: False)
    calls = []
    fast = {"int8": 0.5, "int4": 0.6}

    def timed(keys):
        calls.append(keys)
        return {k: {"request_s": fast.get(k, 1.0), "dense_from": 4} for k in keys}

    monkeypatch.setattr("ayo.engines.llm.quant.time_formats", timed)
    auto = EngineConfig(dtype="auto")
    assert (auto.dtype, auto.weights) == ("float32", "int8")
    assert "against 600 for int4" in auto.format_reason and auto.format_key == "int8"
    assert EngineConfig(dtype="auto").weights == "int8" and len(calls) == 1
    stored = json.loads((tmp_path / "formats.json").read_text())
    assert next(iter(stored.values()))["int8"]["request_s"] == 0.5
    assert set(cfg.AUTO_CANDIDATES) <= set(calls[0])
    # where the CPU multiplies bfloat16 natively, the quantized formats are timed in it too
    monkeypatch.setattr("ayo.engines.llm.attention.native_bf16_matmul", lambda: True)
    fast["int4-bfloat16"] = 0.4
    auto = EngineConfig(dtype="auto")
    assert calls[-1] == ("int8-bfloat16", "int4-bfloat16")  # only what was not stored
    assert (auto.dtype, auto.weights, auto.format_key) == ("bfloat16", "int4", "int4-bfloat16")


@pytest.mark.slow
async def test_smollm2_quantized_close_to_transformers_float32(smol):
    """Each quantized format on the GGUF (int4: its Q4_1 blocks as they are), decode steps
    through the quantized kernels and prefill through the dense copy, scores the float32 greedy
    continuations close to transformers in float32: within 0.1 nats per token on average
    (measured 0.02-0.05; bfloat16 weights 0.02)."""
    loaded = smol.loaded
    for kind in ("int4", "int8"):
        conf = EngineConfig(weights=kind, kv_cache_gib=0.25)
        model = LlamaModel(
            loaded.config, loaded.weights, conf.torch_dtype, weight_format=kind,
            blocks=loaded.blocks, dense_from=4,
        )  # fmt: skip
        assert model.weight_bytes < smol.model.weight_bytes / 3.5
        gaps = []
        async with LLMEngine(model, smol.tokenizer, conf) as eng:
            for ctx, full in zip(smol.prompts, smol.expected):
                cont = full[:12]  # one token at a time: every step a single-row decode
                seq = await eng.open(ctx)
                got = []
                for t in cont:
                    (score,) = await eng.score_tokens(seq, [[t]])
                    got += score.token_logprobs
                    await eng.prefill(seq, [t])
                await eng.close(seq)
                with torch.inference_mode():
                    logits = smol.hf(torch.tensor([ctx + cont])).logits[0].float()
                logp = torch.log_softmax(logits, -1)
                want = [logp[len(ctx) - 1 + j, t].item() for j, t in enumerate(cont)]
                gaps.append((torch.tensor(got) - torch.tensor(want)).abs().mean().item())
        assert max(gaps) < 0.1, (kind, gaps)
