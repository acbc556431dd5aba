import torch


def similarity_topk(
    queries: torch.Tensor, keys: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact inner-product top-k: ``scores, ids [Q, min(k, N)]``, best first."""
    scores = queries.float() @ keys.float().T
    top = torch.topk(scores, min(k, keys.shape[0]), dim=1)
    return top.values, top.indices
