"""Backend choice and argument checks of the public kernel API."""

import pytest
import torch

import ayo.kernels as K
from ayo.kernels import backend as kb


def test_default_backend_on_cpu_is_torch(monkeypatch):
    x = torch.randn(2, 8)
    monkeypatch.setattr(K.api, "_impl", _recording_impl(K.api._impl, seen := []))
    K.rms_norm(x, torch.ones(8), 1e-6)
    assert seen == [("rms_norm", "torch")]


def _recording_impl(impl, seen):
    def wrapper(op, backend, device, supported=K.api._ALL):
        seen.append((op, kb.resolve(backend, device, op, supported)))
        return impl(op, backend, device, supported)

    return wrapper


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown kernel backend 'cuda'"):
        K.silu_and_mul(torch.randn(2, 4), backend="cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error path")
def test_flashinfer_on_cpu_is_a_clear_error():
    with pytest.raises(K.BackendUnavailable, match="flashinfer"):
        K.silu_and_mul(torch.randn(2, 4), backend="flashinfer")


def test_op_without_that_backend():
    with pytest.raises(ValueError, match="similarity_topk has no 'flashinfer'"):
        K.similarity_topk(torch.randn(2, 4), torch.randn(5, 4), 2, backend="flashinfer")


def test_available_backends_lists_torch_last():
    assert kb.available_backends("cpu")[-1] == "torch"


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: K.rms_norm(torch.randn(2, 8), torch.ones(7), 1e-6), "weight"),
        (lambda: K.silu_and_mul(torch.randn(2, 7)), "even"),
        (
            lambda: K.paged_decode_attention(
                torch.randn(2, 5, 8),
                torch.zeros(4, 2, 2, 8),
                torch.zeros(4, 2, 2, 8),
                torch.zeros(2, 2, dtype=torch.int32),
                torch.ones(2, dtype=torch.int32),
                1.0,
            ),
            "multiple",
        ),
        (
            lambda: K.paged_prefill_attention(
                torch.randn(3, 2, 8),
                torch.zeros(4, 2, 2, 8),
                torch.zeros(4, 2, 2, 8),
                torch.zeros(1, 2, dtype=torch.int32),
                torch.tensor([0, 3], dtype=torch.int32),
                torch.tensor([2], dtype=torch.int32),
                1.0,
            ),
            "q_len",
        ),
        (
            lambda: K.write_kv_cache(
                torch.randn(3, 2, 8),
                torch.randn(3, 2, 8),
                torch.zeros(4, 2, 3, 8),
                torch.zeros(4, 2, 3, 8),
                torch.zeros(3, dtype=torch.int64),
            ),
            "heads",
        ),
        (lambda: K.similarity_topk(torch.randn(2, 4), torch.randn(5, 3), 1), "dimension"),
    ],
)
def test_bad_shapes_raise_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
