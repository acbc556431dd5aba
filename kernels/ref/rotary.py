import torch


def apply_rotary(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """NeoX / Llama half rotation, written into ``q`` and ``k`` in place (also returned).

    x1, x2 = x[..., :D/2], x[..., D/2:];  x1' = x1*cos - x2*sin;  x2' = x2*cos + x1*sin,
    with cos/sin cast to the tensors' dtype first, as Hugging Face does.
    """
    half = q.shape[-1] // 2
    cs = cos_sin_cache[positions.long()]
    cos = cs[:, None, :half].to(q.dtype)
    sin = cs[:, None, half:].to(q.dtype)
    for x in (q, k):
        x1, x2 = x[..., :half], x[..., half:]
        x1_sin, x2_sin = x1 * sin, x2 * sin
        x1.mul_(cos).sub_(x2_sin)
        x2.mul_(cos).add_(x1_sin)
    return q, k
