import torch
import torch.nn.functional as F


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]``: the gated MLP of Llama (gate first, then up)."""
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]
