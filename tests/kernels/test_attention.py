"""Paged decode and prefill attention: Triton vs the torch reference (which is SDPA on a
gathered, masked copy of the cache)."""

import pytest
import torch

import ayo.kernels as K
from ayo.kernels.ref import attention as ref_attention

from .conftest import DEVICE, DTYPES, assert_close
from .paged import make_paged

# (query heads, KV heads): GQA ratios 1, 3 and 4; non-power-of-two head counts.
HEADS = [(3, 3), (9, 3), (8, 2)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [1, 16])
@pytest.mark.parametrize("heads", HEADS)
def test_decode_matches_reference(dtype, block_size, heads):
    num_heads, num_kv_heads = heads
    batch = make_paged([1, 17, 100], block_size, num_kv_heads, 64, dtype, DEVICE)
    q = torch.randn(3, num_heads, 64, device=DEVICE).to(dtype)
    args = (q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens, 0.125)
    expected = K.paged_decode_attention(*args, backend="torch")
    actual = K.paged_decode_attention(*args, backend="triton")
    assert not actual.isnan().any()
    assert_close(actual, expected)


def test_decode_large_batch_groups_by_length():
    """Batches of 16+ are sorted by length and padded per group: same result as one group."""
    lens = torch.randint(1, 120, (21,)).tolist()
    batch = make_paged(lens, 16, 3, 64, torch.float32, DEVICE)
    q = torch.randn(21, 9, 64, device=DEVICE)
    args = (q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens, 0.125)
    grouped = ref_attention.paged_decode_attention(*args, groups=4)
    single = ref_attention.paged_decode_attention(*args, groups=1)
    torch.testing.assert_close(grouped, single, atol=1e-6, rtol=1e-6)
    assert_close(K.paged_decode_attention(*args, backend="triton"), grouped)


@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_odd_head_dim(dtype):
    batch = make_paged([5, 33], 16, 2, 40, dtype, DEVICE)
    q = torch.randn(2, 6, 40, device=DEVICE).to(dtype)
    args = (q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens, 40**-0.5)
    assert_close(
        K.paged_decode_attention(*args, backend="triton"),
        K.paged_decode_attention(*args, backend="torch"),
    )


# (seq_lens, q_lens): full prefill, chunks appended to a cached prefix, single tokens.
PREFILL_CASES = {
    "full": ([17, 100, 1], [17, 100, 1]),
    "cached_prefix": ([100, 17, 40], [5, 1, 33]),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [1, 16])
@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("case", PREFILL_CASES)
def test_prefill_matches_reference(dtype, block_size, heads, case):
    seq_lens, q_lens = PREFILL_CASES[case]
    num_heads, num_kv_heads = heads
    batch = make_paged(seq_lens, block_size, num_kv_heads, 64, dtype, DEVICE)
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(int(cu[-1]), num_heads, 64, device=DEVICE).to(dtype)
    args = (q, batch.k_cache, batch.v_cache, batch.block_tables, cu.to(DEVICE), batch.seq_lens)
    expected = K.paged_prefill_attention(*args, 0.125, backend="torch")
    actual = K.paged_prefill_attention(*args, 0.125, backend="triton")
    assert not actual.isnan().any()
    assert_close(actual, expected)


def test_prefill_last_token_equals_decode():
    """The last new token of a prefill sees exactly what a decode of it would see."""
    batch = make_paged([30, 64], 16, 3, 64, torch.float32, DEVICE)
    q = torch.randn(2, 9, 64, device=DEVICE)
    cu = torch.tensor([0, 1, 2], dtype=torch.int32, device=DEVICE)
    caches = (batch.k_cache, batch.v_cache, batch.block_tables)
    prefill = K.paged_prefill_attention(q, *caches, cu, batch.seq_lens, 0.125, backend="torch")
    decode = K.paged_decode_attention(q, *caches, batch.seq_lens, 0.125, backend="torch")
    torch.testing.assert_close(prefill, decode, atol=1e-6, rtol=1e-6)


def test_reference_against_dense_causal_attention():
    """The reference itself against plain causal softmax attention on contiguous K/V."""
    seq, heads, kv_heads, dim = 20, 4, 2, 16
    q = torch.randn(seq, heads, dim, dtype=torch.float64)
    k = torch.randn(seq, kv_heads, dim, dtype=torch.float64)
    v = torch.randn(seq, kv_heads, dim, dtype=torch.float64)
    k_cache = k.reshape(5, 4, kv_heads, dim).contiguous()
    v_cache = v.reshape(5, 4, kv_heads, dim).contiguous()
    table = torch.arange(5, dtype=torch.int32)[None]
    cu = torch.tensor([0, seq], dtype=torch.int32)
    lens = torch.tensor([seq], dtype=torch.int32)
    out = K.paged_prefill_attention(q, k_cache, v_cache, table, cu, lens, 0.25, backend="torch")
    kk = k.repeat_interleave(2, dim=1)
    vv = v.repeat_interleave(2, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, kk) * 0.25
    scores = scores.masked_fill(torch.ones(seq, seq).triu(1).bool(), float("-inf"))
    expected = torch.einsum("hqk,khd->qhd", scores.softmax(-1), vv)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("heads", [(2, 2), (3, 1), (8, 1)])  # GQA groups 1, 3, 8
def test_split_kv_decode_against_float64(heads):
    """Flash-decoding: contexts of 0 to 4097 tokens cut into parts and merged equal a float64
    reference; a sequence of length 0 attends to nothing and gets 0."""
    from ayo.kernels.triton_ops import attention_decode

    num_heads, num_kv_heads = heads
    lens = [0, 1, 15, 16, 17, 1000, 4097]
    batch = make_paged([max(n, 1) for n in lens], 16, num_kv_heads, 32, torch.float32, DEVICE)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    q = torch.randn(len(lens), num_heads, 32, device=DEVICE)
    wide = [t.double() for t in (q, batch.k_cache, batch.v_cache)]
    expected = ref_attention.paged_decode_attention(
        *wide, batch.block_tables, seq_lens, 0.125, groups=1
    )
    expected[0] = 0.0  # nothing to attend to
    args = (q, batch.k_cache, batch.v_cache, batch.block_tables, seq_lens, 0.125)
    bound = batch.block_tables.shape[1] * 16
    assert attention_decode.num_parts(len(lens), num_kv_heads, bound) > 1
    for parts in (None, 1):  # split (the default here) and whole
        actual = attention_decode.paged_decode_attention(*args, parts=parts)
        assert not actual.isnan().any()
        torch.testing.assert_close(actual.double(), expected, atol=2e-5, rtol=1e-5)
