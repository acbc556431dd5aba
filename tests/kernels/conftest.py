"""Kernel tests: every Triton kernel against the torch reference.

Without CUDA, Triton runs in its interpreter: TRITON_INTERPRET=1 must be set before the kernels
are decorated, i.e. before ``ayo.kernels.triton_ops`` is first imported (it is imported lazily).
"""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

DEVICE = torch.device("cuda" if HAS_CUDA else "cpu")

# Triton's interpreter computes bf16 tl.dot wrongly (the kernels upcast first); testing it there
# is slow, so bf16 runs on the GPU only for the dot-based kernels.
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if HAS_CUDA else [])
ALL_DTYPES = [torch.float32, torch.float16, torch.bfloat16]

# (atol, rtol) per dtype. fp32 kernels use exact (ieee) dots; half types accumulate in fp32
# but round inputs and outputs.
TOL = {
    torch.float32: (2e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}
# The interpreter also rounds fp32 -> bf16 toward zero (the GPU rounds to nearest even): up to
# one bf16 ulp per cast, which cancellation in the rotary can magnify a few times.
BF16_CAST_EXACT = HAS_CUDA
if not BF16_CAST_EXACT:
    TOL[torch.bfloat16] = (4e-2, 2e-2)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, scale: float = 1.0) -> None:
    atol, rtol = TOL[expected.dtype]
    torch.testing.assert_close(
        actual.float(), expected.float(), atol=atol * scale, rtol=rtol * scale, equal_nan=False
    )


def pytest_report_header(config):
    mode = "CUDA" if HAS_CUDA else "CPU, Triton interpreter (TRITON_INTERPRET=1)"
    return f"ayo kernels: {mode}"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
