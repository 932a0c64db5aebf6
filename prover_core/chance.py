"""The judge against chance, measured inside training: the paper's random-segment ablation run live.

A share of the verified groups (``ProverConfig.control_share``) verifies, in place of the judge's segment, a
uniformly random admissible segment *of the same length* on the same successful run (:func:`control_segment`).
Both kinds are verified and credited alike, so the difference of their acceptance rates is the judge's *lift*:

    lift = a_J / n_J - a_C / n_C

``a``: accepted, ``n``: verified, ``J``: the judge's segments, ``C``: the controls. Its 95% interval is Newcombe's
hybrid score interval for a difference of two proportions (Newcombe 1998, method 10), built from the Wilson score
interval of each rate:

    L = lift - sqrt((p_J - l_J)^2 + (u_C - p_C)^2),   U = lift + sqrt((u_J - p_J)^2 + (p_C - l_C)^2)

``LiftWindow`` keeps the counts of the last ``steps`` training steps. A lift whose interval lies above 0 says the
judge spends the Monte Carlo budget better than chance; an interval holding 0 says it has not shown it yet.
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from prover_core.data import Segment, SegmentRules, Trajectory

__all__ = ["Lift", "LiftWindow", "control_segment", "is_control", "wilson"]

Z95 = 1.959963984540054
"""The standard normal's 97.5% quantile."""


def is_control(group_id: str, share: float, seed: int = 0) -> bool:
    """Whether the group ``group_id`` verifies a random control segment: a hash of ``(seed, group_id)`` read as a
    uniform number in [0, 1) falls below ``share``, so about ``share`` of the groups are controls whatever their
    order, and the draw is the same on every rerun."""
    if share <= 0.0:
        return False
    digest = hashlib.sha256(f"control\x00{seed}\x00{group_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < share


def control_segment(success: Trajectory, length: int, rules: SegmentRules, seed: int = 0) -> Segment | None:
    """A uniformly random admissible segment of ``length`` turns on ``success`` (``None`` when none has that
    length): its start drawn uniformly from ``0..last - length + 1``, ``last`` the admissible end
    (``rules``), from a generator seeded by ``(seed, success.id)``."""
    last = rules.last_end(success.num_turns)
    starts = last - length + 2
    if length < 1 or length > rules.max_turns or starts < 1:
        return None
    rng = np.random.default_rng(list(hashlib.sha256(f"{seed}\x00{success.id}".encode()).digest()[:8]))
    start = int(rng.integers(starts))
    return Segment(trajectory_id=success.id, start=start, end=start + length - 1)


def wilson(accepted: int, verified: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``accepted / verified``:
    ``(p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)``; ``(0, 1)`` when ``verified`` is 0."""
    if verified == 0:
        return 0.0, 1.0
    p, n = accepted / verified, verified
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z * z / n)), min(1.0, (centre + spread) / (1 + z * z / n))


@dataclass(frozen=True)
class Lift:
    """Acceptances of the judge's segments and of the random controls, and the lift with its 95% interval."""

    judge_accepted: int = 0
    judge_verified: int = 0
    control_accepted: int = 0
    control_verified: int = 0

    def __add__(self, other: Lift) -> Lift:
        return Lift(
            self.judge_accepted + other.judge_accepted,
            self.judge_verified + other.judge_verified,
            self.control_accepted + other.control_accepted,
            self.control_verified + other.control_verified,
        )

    @property
    def judge_rate(self) -> float:
        return self.judge_accepted / self.judge_verified if self.judge_verified else math.nan

    @property
    def control_rate(self) -> float:
        return self.control_accepted / self.control_verified if self.control_verified else math.nan

    @property
    def lift(self) -> float:
        """``a_J / n_J - a_C / n_C`` (NaN until both kinds have been verified)."""
        return self.judge_rate - self.control_rate

    def interval(self, z: float = Z95) -> tuple[float, float]:
        """Newcombe's hybrid score interval of the lift (module docstring); ``(nan, nan)`` until both kinds have
        been verified."""
        if not (self.judge_verified and self.control_verified):
            return math.nan, math.nan
        pj, pc = self.judge_rate, self.control_rate
        lj, uj = wilson(self.judge_accepted, self.judge_verified, z)
        lc, uc = wilson(self.control_accepted, self.control_verified, z)
        d = pj - pc
        return d - math.hypot(pj - lj, uc - pc), d + math.hypot(uj - pj, pc - lc)

    def metrics(self, prefix: str = "prover/") -> dict[str, float]:
        """The lift, its interval and the counts behind it, as a trainer logs them."""
        low, high = self.interval()
        return {
            f"{prefix}judge_lift": self.lift,
            f"{prefix}judge_lift_low": low,
            f"{prefix}judge_lift_high": high,
            f"{prefix}judge_accept_rate": self.judge_rate,
            f"{prefix}control_accept_rate": self.control_rate,
            f"{prefix}judge_verified": float(self.judge_verified),
            f"{prefix}control_verified": float(self.control_verified),
        }


class LiftWindow:
    """The :class:`Lift` of the last ``steps`` training steps (a running window: older steps drop out)."""

    def __init__(self, steps: int = 50) -> None:
        if steps < 1:
            raise ValueError(f"steps must be at least 1, got {steps}")
        self._steps: deque[Lift] = deque(maxlen=steps)

    def add(self, step: Lift) -> Lift:
        """Record one step's counts; returns the window's total."""
        self._steps.append(step)
        return self.total

    @property
    def total(self) -> Lift:
        return sum(self._steps, Lift())
