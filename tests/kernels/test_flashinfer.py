"""FlashInfer calls against the torch reference. They need CUDA and the flashinfer package;
elsewhere every case here is skipped with that reason."""

import importlib.util

import pytest
import torch

import ayo.kernels as K

from .conftest import HAS_CUDA, assert_close
from .paged import make_paged

pytestmark = pytest.mark.skipif(
    not (HAS_CUDA and importlib.util.find_spec("flashinfer") is not None),
    reason="FlashInfer needs a CUDA GPU and the flashinfer package (pip install 'ayo[gpu]')",
)
DEVICE = torch.device("cuda")
DTYPES = [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fused", [False, True])
def test_rms_norm(dtype, fused):
    x = torch.randn(19, 576, device=DEVICE, dtype=dtype)
    w = torch.randn(576, device=DEVICE, dtype=dtype)
    res = torch.randn_like(x) if fused else None
    ours = K.rms_norm(x, w, 1e-5, res, backend="flashinfer")
    ref = K.rms_norm(x, w, 1e-5, res, backend="torch")
    for a, b in zip(ours, ref) if fused else [(ours, ref)]:
        assert_close(a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary(dtype):
    cache = K.rotary_cos_sin_cache(64, 4096, 100000.0, device=DEVICE)
    q = torch.randn(17, 9, 64, device=DEVICE, dtype=dtype)
    k = torch.randn(17, 3, 64, device=DEVICE, dtype=dtype)
    pos = torch.randint(0, 4096, (17,), device=DEVICE)
    ref = K.apply_rotary(q.clone(), k.clone(), pos, cache, backend="torch")
    ours = K.apply_rotary(q.clone(), k.clone(), pos, cache, backend="flashinfer")
    assert_close(ours[0], ref[0])
    assert_close(ours[1], ref[1])


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul(dtype):
    x = torch.randn(19, 2 * 1536, device=DEVICE, dtype=dtype)
    assert_close(K.silu_and_mul(x, backend="flashinfer"), K.silu_and_mul(x, backend="torch"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [1, 16])
@pytest.mark.parametrize("heads", [(9, 3), (8, 2), (4, 4)])
def test_decode(dtype, block_size, heads):
    batch = make_paged([1, 17, 100], block_size, heads[1], 64, dtype, DEVICE)
    q = torch.randn(3, heads[0], 64, device=DEVICE, dtype=dtype)
    args = (q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens, 0.125)
    assert_close(
        K.paged_decode_attention(*args, backend="flashinfer"),
        K.paged_decode_attention(*args, backend="torch"),
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [1, 16])
def test_prefill_with_cached_prefix(dtype, block_size):
    seq_lens = [100, 17, 40]  # 5, 17 and 33 new tokens
    batch = make_paged(seq_lens, block_size, 3, 64, dtype, DEVICE)
    cu = torch.tensor([0, 5, 22, 55], dtype=torch.int32, device=DEVICE)
    q = torch.randn(55, 9, 64, device=DEVICE, dtype=dtype)
    args = (q, batch.k_cache, batch.v_cache, batch.block_tables, cu, batch.seq_lens, 0.125)
    assert_close(
        K.paged_prefill_attention(*args, backend="flashinfer"),
        K.paged_prefill_attention(*args, backend="torch"),
    )


def test_sample_greedy_and_top_k():
    logits = torch.randn(8, 1000, device=DEVICE)
    greedy = K.sample(logits, 0.0, backend="flashinfer")
    assert torch.equal(greedy, logits.argmax(1))
    drawn = K.sample(logits, 1.0, top_k=3, backend="flashinfer")
    top3 = logits.topk(3, dim=1).indices
    assert (top3 == drawn[:, None]).any(1).all()
