"""RMSNorm, rotary embedding, SiLU-and-mul and the KV-cache write: Triton vs reference, and
the references vs Hugging Face's Llama modules (the peer the LLM engine must match)."""

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama import modeling_llama as hf

import ayo.kernels as K

from .conftest import ALL_DTYPES, BF16_CAST_EXACT, DEVICE, assert_close


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(1, 64), (7, 576), (3, 5, 99)])
@pytest.mark.parametrize("fused", [False, True])
def test_rms_norm(dtype, shape, fused):
    x = torch.randn(shape, device=DEVICE).to(dtype)
    w = torch.randn(shape[-1], device=DEVICE).to(dtype)
    res = torch.randn(shape, device=DEVICE).to(dtype) if fused else None
    expected = K.rms_norm(x, w, 1e-5, res, backend="torch")
    actual = K.rms_norm(x, w, 1e-5, res, backend="triton")
    if fused:
        assert_close(actual[0], expected[0])
        if dtype != torch.bfloat16 or BF16_CAST_EXACT:
            assert torch.equal(actual[1], expected[1])  # the residual sum rounds once: exact
        else:
            assert_close(actual[1], expected[1])
    else:
        assert_close(actual, expected)


def test_rms_norm_reference_equals_hf():
    norm = hf.LlamaRMSNorm(576, eps=1e-5)
    norm.weight.data = torch.randn(576)
    x = torch.randn(4, 9, 576)
    assert torch.equal(K.rms_norm(x, norm.weight, 1e-5), norm(x))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("tokens", [1, 17, 100])
@pytest.mark.parametrize("heads", [(9, 3), (4, 4)])
def test_rotary(dtype, tokens, heads):
    cache = K.rotary_cos_sin_cache(64, 8192, 100000.0, device=DEVICE)
    q = torch.randn(tokens, heads[0], 64, device=DEVICE).to(dtype)
    k = torch.randn(tokens, heads[1], 64, device=DEVICE).to(dtype)
    pos = torch.randint(0, 8192, (tokens,), device=DEVICE)
    q_ref, k_ref = K.apply_rotary(q.clone(), k.clone(), pos, cache, backend="torch")
    q_out, k_out = q.clone(), k.clone()
    result = K.apply_rotary(q_out, k_out, pos, cache, backend="triton")
    assert result[0] is q_out and result[1] is k_out  # in place
    assert_close(q_out, q_ref)
    assert_close(k_out, k_ref)


def test_rotary_strided_view_in_place():
    """q and k as views into one fused QKV buffer, as the engine holds them."""
    cache = K.rotary_cos_sin_cache(64, 512, 10000.0, device=DEVICE)
    qkv = torch.randn(17, (9 + 3 + 3) * 64, device=DEVICE)
    expected = qkv.clone()
    pos = torch.arange(17, device=DEVICE)
    for buf, backend in ((expected, "torch"), (qkv, "triton")):
        q = buf[:, : 9 * 64].view(17, 9, 64)
        k = buf[:, 9 * 64 : 12 * 64].view(17, 3, 64)
        K.apply_rotary(q, k, pos, cache, backend=backend)
    assert_close(qkv, expected)


def test_rotary_reference_equals_hf():
    config = LlamaConfig(hidden_size=576, num_attention_heads=9, rope_theta=100000.0)
    rope = hf.LlamaRotaryEmbedding(config)
    pos = torch.arange(300)[None]
    q = torch.randn(1, 9, 300, 64)
    k = torch.randn(1, 3, 300, 64)
    cos, sin = rope(q, pos)
    q_hf, k_hf = hf.apply_rotary_pos_emb(q, k, cos, sin)
    cache = K.rotary_cos_sin_cache(64, 300, 100000.0)
    q_ours = q[0].transpose(0, 1).contiguous()
    k_ours = k[0].transpose(0, 1).contiguous()
    K.apply_rotary(q_ours, k_ours, pos[0], cache)
    torch.testing.assert_close(q_ours, q_hf[0].transpose(0, 1), atol=2e-6, rtol=1e-6)
    torch.testing.assert_close(k_ours, k_hf[0].transpose(0, 1), atol=2e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(1, 2 * 64), (19, 2 * 1536), (2, 3, 2 * 99)])
def test_silu_and_mul(dtype, shape):
    x = torch.randn(shape, device=DEVICE).to(dtype)
    assert_close(K.silu_and_mul(x, backend="triton"), K.silu_and_mul(x, backend="torch"))


def test_silu_and_mul_reference_equals_hf_mlp():
    config = LlamaConfig(hidden_size=64, intermediate_size=96)
    mlp = hf.LlamaMLP(config)
    x = torch.randn(5, 64)
    gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
    ours = mlp.down_proj(K.silu_and_mul(x @ gate_up.T))
    torch.testing.assert_close(ours, mlp(x), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("block_size", [1, 16])
@pytest.mark.parametrize("heads", [3, 8])
def test_write_kv_cache(dtype, block_size, heads):
    tokens = 37
    num_blocks = 64 // block_size + 40
    shape = (num_blocks, block_size, heads, 64)
    k_cache = torch.full(shape, float("nan"), device=DEVICE).to(dtype)
    v_cache = torch.full(shape, float("nan"), device=DEVICE).to(dtype)
    # k and v as strided views of a fused buffer; some tokens skipped with slot -1.
    kv = torch.randn(tokens, 2 * heads * 64 + 8, device=DEVICE).to(dtype)
    k = kv[:, : heads * 64].view(tokens, heads, 64)
    v = kv[:, heads * 64 : 2 * heads * 64].view(tokens, heads, 64)
    slots = torch.randperm(num_blocks * block_size, device=DEVICE)[:tokens]
    slots[::5] = -1
    caches = {}
    for backend in ("torch", "triton"):
        kc, vc = k_cache.clone(), v_cache.clone()
        K.write_kv_cache(k, v, kc, vc, slots, backend=backend)
        caches[backend] = (kc, vc)
    for ours, ref in zip(caches["triton"], caches["torch"]):
        torch.testing.assert_close(ours, ref, atol=0, rtol=0, equal_nan=True)
    flat = caches["triton"][0].view(-1, heads, 64)
    kept = slots >= 0
    assert torch.equal(flat[slots[kept]], k[kept])
    assert flat.isnan().any(dim=(1, 2)).sum() == flat.shape[0] - int(kept.sum())
