"""The CPU attention paths in bf16 and with length groups against the float32 references."""

from __future__ import annotations

import pytest
import torch

from ayo import kernels
from ayo.engines.llm.attention import decode_matmul, plan_decode, prefill_matmul
from ayo.kernels.ref.attention import paged_decode_attention as ref_decode

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


def paged(dtype, num_blocks=40, bs=5, hkv=3, d=16):
    g = torch.Generator().manual_seed(0)
    k = torch.randn(num_blocks, bs, hkv, d, generator=g).to(dtype)
    v = torch.randn(num_blocks, bs, hkv, d, generator=g).to(dtype)
    table = torch.randperm(num_blocks, generator=g)[:30].view(3, 10).to(torch.int32)
    return k, v, table


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("groups", [1, 3])
def test_decode_matches_kernel(dtype, groups):
    k, v, table = paged(dtype, num_blocks=400)
    table = torch.randperm(400, generator=torch.Generator().manual_seed(2))[:390].view(13, 30)
    table = table.to(torch.int32)
    q = torch.randn(13, 9, 16).to(dtype)
    lens = torch.tensor([1, 19, 47, 150, 3, 77, 5, 6, 100, 149, 2, 33, 64], dtype=torch.int32)
    want = kernels.paged_decode_attention(q.float(), k.float(), v.float(), table, lens, 0.25)
    got = ref_decode(q, k, v, table, lens, 0.25, groups=groups)
    torch.testing.assert_close(got.float(), want, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("groups", [1, 3])
def test_engine_decode_plan_matches_kernel(dtype, groups):
    """The engine's CPU decode: a plan built once per step (gather indices, masks, length
    groups), all KV heads per call, q a strided view of a fused projection as in the model."""
    k, v, _ = paged(dtype, num_blocks=400)
    table = torch.randperm(400, generator=torch.Generator().manual_seed(2))[:390].view(13, 30)
    table = table.to(torch.int32)
    fused = torch.randn(13, 9 * 16 + 40).to(dtype)
    q = fused[:, : 9 * 16].view(13, 9, 16)
    lens = torch.tensor([1, 19, 47, 150, 3, 77, 5, 6, 100, 149, 2, 33, 64], dtype=torch.int32)
    plans = plan_decode(table, lens, block_size=5, groups=groups)
    assert len(plans) == groups
    want = kernels.paged_decode_attention(q.float(), k.float(), v.float(), table, lens, 0.25)
    got = decode_matmul(q, k, v, plans, 0.25)
    torch.testing.assert_close(got.float(), want, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prefill_matches_kernel(dtype):
    k, v, table = paged(dtype)
    cu = torch.tensor([0, 7, 8, 27], dtype=torch.int32)
    lens = torch.tensor([7, 33, 19], dtype=torch.int32)  # chunks appended to cached prefixes
    q = torch.randn(27, 9, 16).to(dtype)
    want = kernels.paged_prefill_attention(q.float(), k.float(), v.float(), table, cu, lens, 0.25)
    got = prefill_matmul(q, k, v, table, cu, lens, 0.25)
    torch.testing.assert_close(got.float(), want, **TOL[dtype])


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [0, 1, 5, 64])
def test_packed_linear_matches_f_linear(dtype, rows):
    """The model's CPU matmuls: oneDNN on a weight packed once, against ``F.linear``, with and
    without bias, on a strided input (the model passes views of fused projections)."""
    from ayo.engines.llm.model import onednn_linear, pack_weight, uses_packed_linear

    if not uses_packed_linear(torch.device("cpu"), dtype):
        pytest.skip(f"oneDNN has no {dtype} path on this CPU (it needs AVX-512 or AVX-NE-CONVERT)")
    g = torch.Generator().manual_seed(3)
    w = torch.randn(96, 40, generator=g).to(dtype)
    b = torch.randn(96, generator=g).to(dtype)
    x = torch.randn(rows, 80, generator=g).to(dtype)[:, :40]
    packed = pack_weight(w)
    for bias in (None, b):
        want = torch.nn.functional.linear(x.float(), w.float(), None if bias is None else b.float())
        got = onednn_linear(x, packed, bias)
        assert got.shape == (rows, 96) and got.dtype == dtype
        torch.testing.assert_close(got.float(), want, **TOL[dtype])
