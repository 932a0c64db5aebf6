"""Adaptive, anytime-valid verification: draw continuation pairs in rounds and stop when the answer is clear.

Pair ``i`` is continuation ``i`` from the pre boundary and continuation ``i`` from the post boundary
(sharing seed ``i`` when seeds are paired). Its sign ``D_i = R_post,i - R_pre,i`` is in ``{-1, 0, +1}``.
Pairs are independent of one another (each has its own seeds); within a pair any coupling is allowed.

**Accept** (credit) tests ``H0: p_post <= p_pre``. Among discordant pairs, ``q = P(D = +1 | D != 0) =
P(0,1) / (P(0,1) + P(1,0))``, and ``p_post - p_pre = P(0,1) - P(1,0)``, so ``H0`` is ``q <= 1/2``
whatever the coupling. The e-process

    W_t = mean over q_j in grid of  (2 q_j)^{n+} (2 (1 - q_j))^{n-}

(``n+``/``n-`` the +1/-1 pairs so far; concordant pairs multiply by 1) is a mixture of likelihood
ratios ``Bernoulli(q_j) / Bernoulli(1/2)`` with every ``q_j >= 1/2``. Each factor has conditional mean
``2 (q q_j + (1 - q)(1 - q_j)) <= 1`` when ``q <= 1/2``, so ``W`` is a nonnegative supermartingale under
``H0`` with ``W_0 = 1``, and Ville's inequality gives ``P(sup_t W_t >= 1/alpha) <= alpha``. Accepting
the first time ``W_t >= 1/alpha`` therefore credits a segment with no gain with probability at most
``alpha`` *for any stopping rule*, including stopping early, rounds of any size and the budget cap.

**Futility** (stop without credit) tests ``H1: p_post - p_pre >= min_effect``. Since
``p_post - p_pre <= P(D = +1)``, ``H1`` implies ``P(D = +1) >= delta`` (``delta = min_effect``). The
e-process ``V_t = mean over r_j of (r_j/delta)^{n+} ((1 - r_j)/(1 - delta))^{t - n+}`` with every
``r_j < delta`` is a supermartingale under ``H1`` (each factor's mean ``p r/delta + (1-p)(1-r)/(1-delta)``
falls with ``p`` and is 1 at ``p = delta``), so stopping when ``V_t >= 1/beta`` rejects a segment
whose true gain is at least ``min_effect`` with probability at most ``beta``.

The run also stops, without credit, when the budget is spent or when the accept boundary can no
longer be reached within it (curtailment: this never changes the decision). ``Delta`` is reported
from all pairs drawn; note that after optional stopping it is biased upward for accepted segments
(the bound on false credit concerns the decision, not the size of ``Delta``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "ACCEPT_GRID",
    "Decision",
    "OperatingCharacteristics",
    "SequentialState",
    "SequentialTest",
    "operating_characteristics",
    "pair_probabilities",
]

Decision = Literal["accept", "futile", "budget", "curtailed", "continue"]
"""What the sequential test says after a round: stop (accept, futile, budget, curtailed) or continue."""

ACCEPT_GRID: tuple[float, ...] = (0.6, 0.75, 0.9, 0.99)
"""Alternatives ``q`` mixed in the accept e-process (weights equal). Mass near 1 suits common random
numbers, where a real gain makes almost every discordant pair +1."""


@dataclass(frozen=True)
class SequentialTest:
    """The two anytime-valid boundaries and the budget (in pairs, i.e. continuations per boundary)."""

    alpha: float = 0.3
    """Bound on the probability of crediting a segment with ``p_post <= p_pre``."""
    beta: float = 0.2
    """Bound on the probability of stopping for futility when the gain is at least ``min_effect``."""
    min_effect: float = 0.5
    max_pairs: int = 12
    round_pairs: int = 2
    accept_grid: tuple[float, ...] = ACCEPT_GRID
    futility_grid: tuple[float, ...] = field(default=())
    """``r_j`` of the futility mixture; default ``(delta/8, delta/4, delta/2)``."""

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0 or not 0.0 < self.beta < 1.0:
            raise ValueError("alpha and beta must lie strictly between 0 and 1")
        if not 0.0 < self.min_effect < 1.0:
            raise ValueError("min_effect must lie strictly between 0 and 1")
        if self.max_pairs < 1 or self.round_pairs < 1:
            raise ValueError("max_pairs and round_pairs must be at least 1")
        if not self.accept_grid or any(not 0.5 <= q < 1.0 for q in self.accept_grid):
            raise ValueError("accept_grid needs alternatives q in [0.5, 1)")
        if any(not 0.0 <= r < self.min_effect for r in self.futility_grid):
            raise ValueError("futility_grid needs alternatives r in [0, min_effect)")

    @property
    def futility_alternatives(self) -> tuple[float, ...]:
        d = self.min_effect
        return self.futility_grid or (d / 8, d / 4, d / 2)

    def accept_evidence(self, plus: int, minus: int) -> float:
        """``W`` after ``plus`` +1 pairs and ``minus`` -1 pairs."""
        return sum((2 * q) ** plus * (2 * (1 - q)) ** minus for q in self.accept_grid) / len(self.accept_grid)

    def futility_evidence(self, plus: int, pairs: int) -> float:
        """``V`` after ``pairs`` pairs of which ``plus`` were +1."""
        d = self.min_effect
        alts = self.futility_alternatives
        return sum((r / d) ** plus * ((1 - r) / (1 - d)) ** (pairs - plus) for r in alts) / len(alts)

    def decide(self, plus: int, minus: int, pairs: int, drawn: int | None = None) -> Decision:
        """What to do after ``pairs`` complete pairs (``plus`` of them +1, ``minus`` -1) of ``drawn`` drawn.

        ``drawn`` (default ``pairs``) also counts pairs lost to a failed continuation; the budget
        caps it.
        """
        drawn = pairs if drawn is None else drawn
        if self.accept_evidence(plus, minus) >= 1 / self.alpha:
            return "accept"
        if self.futility_evidence(plus, pairs) >= 1 / self.beta:
            return "futile"
        if drawn >= self.max_pairs:
            return "budget"
        left = self.max_pairs - drawn
        if self.accept_evidence(plus + left, minus) < 1 / self.alpha:
            return "curtailed"
        return "continue"


@dataclass
class SequentialState:
    """Running counts of one adaptive verification."""

    test: SequentialTest
    pairs: int = 0
    drawn: int = 0
    plus: int = 0
    minus: int = 0
    history: list[Decision] = field(default_factory=list)

    def add(self, pre: bool | None, post: bool | None) -> None:
        """Record one drawn pair; ``None`` for a side whose continuation failed (the pair is dropped)."""
        self.drawn += 1
        if pre is None or post is None:
            return
        self.pairs += 1
        self.plus += int(post and not pre)
        self.minus += int(pre and not post)

    def decide(self) -> Decision:
        decision = self.test.decide(self.plus, self.minus, self.pairs, self.drawn)
        self.history.append(decision)
        return decision

    @property
    def accept_evidence(self) -> float:
        return self.test.accept_evidence(self.plus, self.minus)

    @property
    def futility_evidence(self) -> float:
        return self.test.futility_evidence(self.plus, self.pairs)


@dataclass(frozen=True)
class OperatingCharacteristics:
    """Exact behaviour of a :class:`SequentialTest` for given pair probabilities (no failures)."""

    accept: float
    """``P(accept)``: power, or the false-credit rate when ``p_post <= p_pre``."""
    expected_pairs: float
    """``E[pairs drawn]``; the expected continuations are twice this."""
    expected_bonus: float
    """``E[Delta * 1{accept}]`` with ``Delta = (n+ - n-) / pairs`` (per unit lambda)."""
    stops: dict[str, float]
    """Probability of each stopping reason."""


def pair_probabilities(p_pre: float, p_post: float, coupling: str = "independent") -> tuple[float, float]:
    """``(P(D = +1), P(D = -1))`` of one pair: independent draws, or one shared uniform per pair."""
    if coupling == "independent":
        return p_post * (1 - p_pre), p_pre * (1 - p_post)
    if coupling == "shared_uniform":
        return max(0.0, p_post - p_pre), max(0.0, p_pre - p_post)
    raise ValueError(f"unknown coupling {coupling!r}")


def operating_characteristics(test: SequentialTest, p_plus: float, p_minus: float) -> OperatingCharacteristics:
    """Exact ``P(accept)``, expected pairs and expected bonus, by dynamic programming over rounds.

    The state after each round is ``(n+, n-, pairs)``; a round of ``b`` pairs moves it by a
    multinomial ``(b; p_plus, p_minus, 1 - p_plus - p_minus)`` draw, then :meth:`SequentialTest.decide`.
    """
    if p_plus < 0 or p_minus < 0 or p_plus + p_minus > 1 + 1e-12:
        raise ValueError(f"invalid pair probabilities {p_plus}, {p_minus}")
    p_zero = max(0.0, 1.0 - p_plus - p_minus)
    frontier: dict[tuple[int, int], float] = {(0, 0): 1.0}
    drawn = 0
    accept = pairs = bonus = 0.0
    stops: dict[str, float] = {}
    while frontier:
        b = min(test.round_pairs, test.max_pairs - drawn)
        moves = [
            (i, j, math.comb(b, i) * math.comb(b - i, j) * p_plus**i * p_minus**j * p_zero ** (b - i - j))
            for i in range(b + 1)
            for j in range(b - i + 1)
        ]
        drawn += b
        nxt: dict[tuple[int, int], float] = {}
        for (plus, minus), prob in frontier.items():
            for i, j, w in moves:
                if w == 0.0:
                    continue
                key = (plus + i, minus + j)
                nxt[key] = nxt.get(key, 0.0) + prob * w
        frontier = {}
        for (plus, minus), prob in nxt.items():
            decision = test.decide(plus, minus, drawn, drawn)
            if decision == "continue":
                frontier[(plus, minus)] = prob
                continue
            stops[decision] = stops.get(decision, 0.0) + prob
            pairs += prob * drawn
            if decision == "accept":
                accept += prob
                bonus += prob * (plus - minus) / drawn
    return OperatingCharacteristics(accept=accept, expected_pairs=pairs, expected_bonus=bonus, stops=stops)
