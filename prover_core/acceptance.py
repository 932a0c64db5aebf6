"""Acceptance rules for a verified segment, with their exact acceptance probabilities.

A boundary pair gives ``x`` successes of ``m`` continuations before the segment and ``y`` of ``n``
after it; ``Delta = y/n - x/m``. Three rules (``ProverConfig.acceptance``):

``delta_positive`` (the paper's, default)
    accept iff ``Delta > 0``. With independent continuations and equal true rates ``p`` its null
    acceptance rate is ``(1 - sum_j Bin(m,p)(j) Bin(n,p)(j)) / 2`` for ``m = n``: 0.40 at ``p = 0.5``,
    ``K = 8``, so a zero-effect segment earns credit 40% of the time.
``beta_posterior``
    Beta(1, 1) priors on both rates; accept iff ``P(p_post > p_pre | x, y) >= threshold``. The
    posterior probability is the exact finite sum for integer Beta parameters
    (``a_B = y+1, b_B = n-y+1, a_A = x+1, b_A = m-x+1``):
    ``P(p_B > p_A) = sum_{i=0}^{a_B-1} B(a_A+i, b_A+b_B) / ((b_B+i) B(1+i, b_B) B(a_A, b_A))``.
    Not a frequentist test: its null acceptance rate depends on ``p`` (see :func:`acceptance_probability`).
``lower_confidence_bound``
    accept iff the one-sided Clopper-Pearson lower bound of ``p_post`` at level ``alpha/2`` exceeds the
    one-sided upper bound of ``p_pre`` at level ``alpha/2``. If ``p_post <= p_pre`` acceptance needs one
    of the two bounds to miss its rate, so ``P(accept) <= alpha`` for every ``p`` and every coupling of
    the two samples (union bound; pairing does not matter). Conservative, hence low power at ``K = 8``.

:func:`acceptance_probability` computes a rule's acceptance probability and its expected bonus
``E[Delta 1{accept}]`` exactly by summing over the binomial (or paired multinomial) outcomes; at
``p_pre = p_post`` these are the null acceptance rate and the expected false bonus per unit ``lambda``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Literal

__all__ = [
    "AcceptanceRule",
    "Coupling",
    "Direction",
    "RuleName",
    "RULES",
    "acceptance_probability",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "prob_post_greater",
]

RuleName = Literal["delta_positive", "beta_posterior", "lower_confidence_bound"]
"""The acceptance rules by name (``ProverConfig.acceptance``)."""
Direction = Literal["gain", "drop"]
"""What verification tests: a gain (``p_post > p_pre``, positive credit) or a drop (``p_pre > p_post``, negative
credit)."""
Coupling = Literal["independent", "shared_uniform"]
"""How pre continuation ``i`` and post continuation ``i`` are coupled: independent draws, or both
``R = 1{u_i < p}`` from one shared uniform ``u_i`` (perfect common random numbers)."""

RULES: tuple[RuleName, ...] = ("delta_positive", "beta_posterior", "lower_confidence_bound")
"""Every rule name, the paper's first."""


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


@cache
def prob_post_greater(x: int, m: int, y: int, n: int) -> float:
    """``P(p_post > p_pre)`` under independent Beta(1,1) priors, ``x/m`` pre and ``y/n`` post successes.

    Exact finite sum for integer Beta parameters (see the module docstring).
    """
    _check_counts(x, m, y, n)
    a_a, b_a, a_b, b_b = x + 1, m - x + 1, y + 1, n - y + 1
    log_norm = _log_beta(a_a, b_a)
    total = 0.0
    for i in range(a_b):
        total += math.exp(_log_beta(a_a + i, b_a + b_b) - math.log(b_b + i) - _log_beta(1 + i, b_b) - log_norm)
    return min(1.0, max(0.0, total))


def _binom_cdf(k: int, n: int, p: float) -> float:
    """``P(Bin(n, p) <= k)``."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k + 1))


@cache
def clopper_pearson_lower(x: int, n: int, level: float) -> float:
    """One-sided lower bound ``L`` with ``P(Bin(n, L) >= x) = level`` (0 when ``x = 0``)."""
    if not 0 <= x <= n:
        raise ValueError(f"need 0 <= x <= n, got x={x}, n={n}")
    if x == 0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(60):  # P(Bin(n,p) >= x) increases in p
        mid = (lo + hi) / 2
        if 1.0 - _binom_cdf(x - 1, n, mid) < level:
            lo = mid
        else:
            hi = mid
    return lo


@cache
def clopper_pearson_upper(x: int, n: int, level: float) -> float:
    """One-sided upper bound ``U`` with ``P(Bin(n, U) <= x) = level`` (1 when ``x = n``)."""
    if not 0 <= x <= n:
        raise ValueError(f"need 0 <= x <= n, got x={x}, n={n}")
    return 1.0 - clopper_pearson_lower(n - x, n, level)


def _check_counts(x: int, m: int, y: int, n: int) -> None:
    if m < 1 or n < 1 or not 0 <= x <= m or not 0 <= y <= n:
        raise ValueError(f"invalid counts: pre {x}/{m}, post {y}/{n}")


@dataclass(frozen=True)
class AcceptanceRule:
    """One acceptance rule and its parameter (``threshold`` for the posterior, ``alpha`` for the bound)."""

    name: RuleName = "delta_positive"
    threshold: float = 0.9
    alpha: float = 0.1

    def __post_init__(self) -> None:
        if self.name not in RULES:
            raise ValueError(f"unknown acceptance rule {self.name!r}; choose one of {RULES}")
        if not 0.0 < self.threshold < 1.0 or not 0.0 < self.alpha < 1.0:
            raise ValueError("threshold and alpha must lie strictly between 0 and 1")

    def decide(self, x: int, m: int, y: int, n: int) -> tuple[bool, str]:
        """Accept the gain from ``x/m`` (pre) to ``y/n`` (post)? Returns the decision and its reason."""
        _check_counts(x, m, y, n)
        delta = y / n - x / m
        if self.name == "delta_positive":
            ok = delta > 0
            return ok, f"Delta = {delta:+.3f} {'>' if ok else '<='} 0"
        if self.name == "beta_posterior":
            prob = prob_post_greater(x, m, y, n)
            ok = prob >= self.threshold
            return ok, f"Delta = {delta:+.3f}, P(p_post > p_pre) = {prob:.3f} {'>=' if ok else '<'} {self.threshold}"
        low = clopper_pearson_lower(y, n, self.alpha / 2)
        high = clopper_pearson_upper(x, m, self.alpha / 2)
        ok = low > high
        return ok, (
            f"Delta = {delta:+.3f}, lower bound of p_post {low:.3f} {'>' if ok else '<='} "
            f"upper bound of p_pre {high:.3f} (alpha = {self.alpha})"
        )

    def accept(self, x: int, m: int, y: int, n: int, direction: Direction = "gain") -> tuple[bool, str]:
        """:meth:`decide` for ``direction``: a gain from ``x/m`` (pre) to ``y/n`` (post), or a drop, tested as the
        gain with the roles of pre and post swapped (negative credit)."""
        if direction == "gain":
            return self.decide(x, m, y, n)
        ok, reason = self.decide(y, n, x, m)
        return ok, f"drop (roles of pre and post swapped): {reason}"


def _binom_pmf(n: int, p: float) -> list[float]:
    return [math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(n + 1)]


def acceptance_probability(
    rule: AcceptanceRule, p_pre: float, p_post: float, k: int, coupling: Coupling = "independent"
) -> tuple[float, float]:
    """Exact ``(P(accept), E[Delta * 1{accept}])`` with ``k`` continuations at each boundary.

    ``independent``: ``x ~ Bin(k, p_pre)`` and ``y ~ Bin(k, p_post)`` independent. ``shared_uniform``:
    pair ``i`` is ``(1{u_i < p_pre}, 1{u_i < p_post})``; the counts of the pair types (both succeed,
    only the higher-rate side succeeds, neither) are multinomial.
    """
    if not (0.0 <= p_pre <= 1.0 and 0.0 <= p_post <= 1.0) or k < 1:
        raise ValueError(f"need rates in [0, 1] and k >= 1, got {p_pre}, {p_post}, {k}")
    prob = bonus = 0.0
    if coupling == "independent":
        pre, post = _binom_pmf(k, p_pre), _binom_pmf(k, p_post)
        for x, px in enumerate(pre):
            for y, py in enumerate(post):
                if px * py > 0.0 and rule.decide(x, k, y, k)[0]:
                    prob += px * py
                    bonus += px * py * (y - x) / k
        return prob, bonus
    low, high = min(p_pre, p_post), max(p_pre, p_post)
    probs = (low, high - low, 1.0 - high)  # both succeed, only the higher-rate side, neither
    for both in range(k + 1):
        for only in range(k - both + 1):
            rest = k - both - only
            weight = (
                math.factorial(k)
                / (math.factorial(both) * math.factorial(only) * math.factorial(rest))
                * probs[0] ** both
                * probs[1] ** only
                * probs[2] ** rest
            )
            if weight == 0.0:
                continue
            x, y = (both, both + only) if p_post >= p_pre else (both + only, both)
            if rule.decide(x, k, y, k)[0]:
                prob += weight
                bonus += weight * (y - x) / k
    return prob, bonus
