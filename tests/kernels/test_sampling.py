"""Sampling: Triton vs reference on the same exponential noise (identical tokens), and the
reference's own statistics: greedy, top-k/top-p sets, the drawn distribution, seeding."""

import pytest
import torch

import ayo.kernels as K

from .conftest import DEVICE


def _params(batch: int):
    temperature = torch.tensor([0.0, 0.7, 1.0, 1.3, 0.5, 1.0][:batch], device=DEVICE)
    top_k = torch.tensor([0, 5, 0, 50, 1, 3][:batch], device=DEVICE)
    top_p = torch.tensor([1.0, 1.0, 0.9, 0.5, 0.8, 0.3][:batch], device=DEVICE)
    return temperature, top_k, top_p


@pytest.mark.parametrize("vocab", [100, 1000, 5003])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_matches_reference(vocab, dtype):
    batch = 6
    temperature, top_k, top_p = _params(batch)
    for trial in range(3):
        logits = (torch.randn(batch, vocab, device=DEVICE) * (1 + trial)).to(dtype)
        noise = torch.empty(batch, vocab, device=DEVICE).exponential_()
        ref = K.sample(logits, temperature, top_k, top_p, exp_noise=noise, backend="torch")
        ours = K.sample(logits, temperature, top_k, top_p, exp_noise=noise, backend="triton")
        assert torch.equal(ours, ref)


def test_greedy_is_argmax_and_ignores_noise():
    logits = torch.randn(8, 300)
    ids = K.sample(logits, 0.0, generator=torch.Generator().manual_seed(1))
    assert torch.equal(ids, logits.argmax(1))


def test_top_k_and_top_p_sets():
    logits = torch.randn(1, 50).expand(4000, 50).contiguous()
    gen = torch.Generator().manual_seed(0)
    top5 = set(logits[0].topk(5).indices.tolist())
    ids = K.sample(logits, 1.0, top_k=5, generator=gen)
    assert set(ids.tolist()) == top5
    probs = logits[0].softmax(0)
    order = probs.argsort(descending=True)
    nucleus = int((probs[order].cumsum(0) < 0.6).sum()) + 1
    ids = K.sample(logits, 1.0, top_p=0.6, generator=gen)
    assert set(ids.tolist()) == set(order[:nucleus].tolist())


def test_draws_follow_the_distribution():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5])
    n = 40000
    ids = K.sample(
        logits.expand(n, 5).contiguous(), 0.8, generator=torch.Generator().manual_seed(3)
    )
    freq = torch.bincount(ids, minlength=5).float() / n
    expected = (logits / 0.8).softmax(0)
    # 5 sigma of a binomial proportion at n = 40000 is < 0.0125.
    torch.testing.assert_close(freq, expected, atol=0.0125, rtol=0)


def test_seeded_draws_are_reproducible():
    logits = torch.randn(16, 1000)
    a = K.sample(logits, 1.0, 40, 0.95, torch.Generator().manual_seed(7))
    b = K.sample(logits, 1.0, 40, 0.95, torch.Generator().manual_seed(7))
    c = K.sample(logits, 1.0, 40, 0.95, torch.Generator().manual_seed(8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": -1.0}, "temperature"),
        ({"top_k": -2}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
    ],
)
def test_invalid_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        K.sample(torch.randn(2, 10), **kwargs)


def _bits_to_allowed(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """The plain reading of a token bitmask: token j allowed iff bit j % 32 of word j // 32."""
    j = torch.arange(vocab, device=bitmask.device)
    words = bitmask[:, (j // 32).clamp(max=bitmask.shape[1] - 1)]
    bit = ((words >> (j % 32).to(torch.int32)) & 1).bool()
    return bit & (j < 32 * bitmask.shape[1])


@pytest.mark.parametrize("vocab", [33, 1000, 5003])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_token_bitmask_blocks_exactly_the_zero_bits(vocab, backend):
    """Both backends against the bit-by-bit reading, on a subset of rows, a mask narrower than
    the vocabulary (the rest blocked) and negative words (bit 31 set)."""
    gen = torch.Generator().manual_seed(vocab)
    logits = torch.randn(5, vocab, generator=gen).to(DEVICE)
    rows = torch.tensor([3, 0, 4], device=DEVICE)
    words = (vocab + 31) // 32 - (1 if vocab > 64 else 0)
    bitmask = torch.randint(-(2**31), 2**31 - 1, (3, words), generator=gen, dtype=torch.int32)
    bitmask = bitmask.to(DEVICE)
    out = logits.clone()
    K.apply_token_bitmask(out, bitmask, rows, backend=backend)
    expected = logits.clone()
    expected[rows] = logits[rows].masked_fill(~_bits_to_allowed(bitmask, vocab), float("-inf"))
    assert torch.equal(out, expected)


def test_a_masked_draw_never_picks_a_blocked_token():
    logits = torch.randn(2000, 64)
    bitmask = torch.zeros(2000, 2, dtype=torch.int32)
    bitmask[:, 0] = 0b1011  # tokens 0, 1, 3
    bitmask[:, 1] = 1 << 30  # token 62
    K.apply_token_bitmask(logits, bitmask)
    ids = K.sample(logits, 1.5, generator=torch.Generator().manual_seed(0))
    assert set(ids.tolist()) == {0, 1, 3, 62}
