"""Batched inner-product top-k: Triton (tile-local top-k, merged) vs torch.matmul + topk."""

import pytest
import torch

import ayo.kernels as K

from .conftest import DEVICE, DTYPES, TOL


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "num_q, num_keys, dim, k", [(1, 5, 16, 10), (5, 1000, 67, 10), (17, 300, 384, 1)]
)
def test_similarity_topk(dtype, num_q, num_keys, dim, k):
    queries = torch.randn(num_q, dim, device=DEVICE).to(dtype)
    keys = torch.randn(num_keys, dim, device=DEVICE).to(dtype)
    ref_scores, ref_ids = K.similarity_topk(queries, keys, k, backend="torch")
    scores, ids = K.similarity_topk(queries, keys, k, backend="triton")
    assert scores.shape == ids.shape == (num_q, min(k, num_keys))
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(scores, ref_scores, atol=atol * dim**0.5, rtol=rtol)
    if dtype == torch.float32:
        assert torch.equal(ids, ref_ids)
    # Whatever the order among near-ties, each id's score must be its true score.
    true = (queries.float() @ keys.float().T).gather(1, ids)
    torch.testing.assert_close(scores, true, atol=atol * dim**0.5, rtol=rtol)


def test_reference_is_exact_search():
    queries = torch.randn(4, 32)
    keys = torch.randn(200, 32)
    _, ids = K.similarity_topk(queries, keys, 7)
    full = queries @ keys.T
    for row in range(4):
        assert ids[row].tolist() == full[row].argsort(descending=True)[:7].tolist()
