import torch


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm in the order Hugging Face Llama uses: add the residual in the input dtype,
    normalize in float32, cast back, then scale by the weight.

    Traffic: reads x (and residual) and weight, writes out (and the sum): 2-4 x numel bytes.
    """
    if residual is not None:
        x = x + residual
    x32 = x if x.dtype == torch.float32 else x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    out = weight * (y if y.dtype == x.dtype else y.to(x.dtype))
    return out if residual is None else (out, x)
