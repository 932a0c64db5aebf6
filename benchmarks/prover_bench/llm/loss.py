"""The policy loss as TRL and verl compute it: per-token clipped ratio, token-mean or sequence-mean.

Per action token ``j`` of episode ``i``: ``l_ij = -min(r_ij A_ij, clip(r_ij, 1 - eps, 1 + eps) A_ij)`` with
``r_ij = exp(logp_ij - logp_old_ij)``. Aggregation over the mask ``m_ij`` (1 on action tokens):

* ``token-mean`` (verl's ``token-mean``, TRL's ``dapo``): ``sum_ij m_ij l_ij / sum_ij m_ij``;
* ``seq-mean`` (TRL's ``grpo``, verl's ``seq-mean-token-mean``): ``mean_i (sum_j m_ij l_ij / sum_j m_ij)``.

One epoch on fresh samples: ``logp_old`` is ``logp`` detached, so ``r = 1`` and the clip never binds.
"""

from __future__ import annotations

from typing import Any, Literal

Tensor = Any
Aggregation = Literal["token-mean", "seq-mean"]


def clipped_token_loss(logp: Tensor, logp_old: Tensor, adv: Tensor, eps: float = 0.2) -> Tensor:
    """``-min(r A, clip(r, 1-eps, 1+eps) A)`` per token."""
    import torch

    ratio = torch.exp(logp - logp_old)
    return -torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - eps, 1.0 + eps) * adv)


def aggregate(per_token: Tensor, mask: Tensor, how: Aggregation) -> Tensor:
    """Token-mean or sequence-mean of ``per_token`` ``[N, L]`` over ``mask`` ``[N, L]`` (see the module docstring)."""
    mask = mask.to(per_token.dtype)
    if how == "token-mean":
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    if how == "seq-mean":
        per_seq = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return per_seq[mask.sum(dim=1) > 0].mean()
    raise ValueError(f"unknown aggregation {how!r}")


def policy_loss(logp: Tensor, adv: Tensor, mask: Tensor, how: Aggregation, eps: float = 0.2) -> Tensor:
    """The on-policy loss of one epoch: ``logp_old = logp.detach()``."""
    return aggregate(clipped_token_loss(logp, logp.detach(), adv, eps), mask, how)
