"""The paper's ablation: a uniformly random admissible segment."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from prover_core.data import Decline, Proposal, SegmentRules, Trajectory

__all__ = ["RandomJudge"]


class RandomJudge:
    """Picks uniformly among all admissible segments of the successful trajectory.

    The draw depends only on ``seed`` and the trajectory id, so it is reproducible whatever order
    groups are judged in.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        declined = rules.no_segment(success)
        if declined is not None:
            return declined
        candidates = rules.candidates(success)
        rng = np.random.default_rng([self.seed, zlib.crc32(success.id.encode())])
        segment = candidates[int(rng.integers(len(candidates)))]
        return Proposal(segment=segment, rationale="uniformly random admissible segment")
