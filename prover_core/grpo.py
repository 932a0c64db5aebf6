"""The GRPO baseline: group-centred binary outcomes, the advantage every token gets by default.

For a group of G trajectories with binary rewards R_1..R_G,

    A_i = R_i - mean(R)                       (default)
    A_i = (R_i - mean(R)) / (std(R) + eps)    (normalize_std=True; std with ddof=1, as TRL and verl)

A group of one trajectory has advantage 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from prover_core.data import Trajectory

__all__ = ["group_advantages", "grpo_advantages"]


def group_advantages(rewards: ArrayLike, *, normalize_std: bool = False, eps: float = 1e-6) -> NDArray[np.float64]:
    """``A_i = R_i - mean(R)``, optionally divided by ``std(R, ddof=1) + eps``."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"rewards must be a non-empty 1-D array, got shape {r.shape}")
    if r.size == 1:
        return np.zeros(1)
    centred: NDArray[np.float64] = r - r.mean()
    if normalize_std:
        centred = centred / (r.std(ddof=1) + eps)
    return centred


def grpo_advantages(
    groups: Mapping[str, Sequence[Trajectory]], *, normalize_std: bool = False, eps: float = 1e-6
) -> dict[str, float]:
    """The GRPO advantage of every trajectory, by trajectory id."""
    out: dict[str, float] = {}
    for members in groups.values():
        adv = group_advantages([t.success for t in members], normalize_std=normalize_std, eps=eps)
        out.update(zip((t.id for t in members), adv.tolist(), strict=True))
    return out
