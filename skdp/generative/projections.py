"""Projection vectors for sliced score matching, and the PGE paper's randomized response on them."""
import math

import torch


def randomized_response_projections(V, k, epsilon, generator):
    """Algorithm 1 of the PGE supplement, applied to projections ``V`` of shape (B, P, d).

    For each example i (and each projection slot), the k vectors of the batch
    most cosine-similar to v_i (v_i itself first) are its candidates; v_i is
    kept with probability ``e^eps / (e^eps + k - 1)``, else one of the other
    k - 1 is used, uniformly. The vectors are drawn independently of the data,
    so this hides nothing about any record (see doc/privacy.md).
    """
    B = V.shape[0]
    k = min(int(k), B)
    if k < 2 or B == 0:
        return V
    keep = math.exp(epsilon) / (math.exp(epsilon) + k - 1) if epsilon < 700 else 1.0
    out = V.clone()
    for p in range(V.shape[1]):
        unit = torch.nn.functional.normalize(V[:, p], dim=1)
        cosine = unit @ unit.T
        cosine.fill_diagonal_(math.inf)  # v_i is its own first candidate
        candidates = cosine.topk(k, dim=1).indices  # (B, k), column 0 is i itself
        flip = torch.rand(B, generator=generator, device=V.device) >= keep
        other = torch.randint(1, k, (B,), generator=generator, device=V.device)
        chosen = torch.where(flip, candidates[torch.arange(B), other], torch.arange(B, device=V.device))
        out[:, p] = V[chosen, p]
    return out
