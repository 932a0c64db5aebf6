"""The exact joint law of one pre and one post continuation under common random numbers.

A pre continuation starts in state ``a`` at absolute turn ``l`` and a post continuation in ``b`` at
turn ``r + 1`` of the same task; ``D = R_post - R_pre`` in ``{-1, 0, 1}``. With ``K`` pairs,
``Delta = mean(D)``, so ``E[Delta] = V(b) - V(a)`` under every coupling and ``Var(Delta) = Var(D) / K``.
The coupling decides ``Var(D)``:

* ``"independent"``: different seeds, ``P(D = 1) = V_b (1 - V_a)``, ``P(D = -1) = V_a (1 - V_b)``;
* ``"sequential"``: one seed, the ``j``-th own turn of each uses the ``j``-th draws;
* ``"turn"``: one seed, both use the draws of the absolute turn they are at (the pre continuation's
  turns ``l..r`` use draws the post continuation never sees).

The joint chain over ``(pre state or outcome, post state or outcome)`` is propagated exactly: a
shared uniform ``u`` maps to actions (and outcomes) by the inverse CDFs of :func:`family.rollout`,
which are piecewise constant in ``u``, so each joint move is the union of their breakpoints.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Literal

import numpy as np

from prover_bench.family import Family, FloatArray, values

Coupling = Literal["independent", "sequential", "turn"]
WIN, LOSS = -1, -2


def _actions(cum: FloatArray, last: int, us: list[float]) -> list[int]:
    return [min(int((u >= cum).sum()), last) for u in us]


def _move(
    fam: Family, pi: FloatArray, task: int, x: tuple[int, int], moving: tuple[bool, bool]
) -> list[tuple[float, tuple[int, int]]]:
    """The joint next statuses of a pair, each chain moving or not, with shared uniforms."""
    live = [m and s >= 0 for m, s in zip(moving, x, strict=True)]
    if not any(live):
        return [(1.0, x)]
    cums = [np.cumsum(pi[task, s]) if ok else None for s, ok in zip(x, live, strict=True)]
    lasts = [int(np.flatnonzero(fam.allowed[task, s])[-1]) if ok else 0 for s, ok in zip(x, live, strict=True)]
    cuts = sorted({0.0, 1.0, *(float(c) for cum in cums if cum is not None for c in cum if 0.0 < c < 1.0)})
    out: list[tuple[float, tuple[int, int]]] = []
    for lo, hi in itertools.pairwise(cuts):
        mid = (lo + hi) / 2
        acts = [_actions(cum, last, [mid])[0] if cum is not None else -1 for cum, last in zip(cums, lasts, strict=True)]
        p0s = [float(fam.prob[task, s, a, 0]) if a >= 0 else 1.0 for s, a in zip(x, acts, strict=True)]
        ecuts = sorted({0.0, 1.0, *(p for p in p0s if 0.0 < p < 1.0)})
        for elo, ehi in itertools.pairwise(ecuts):
            emid = (elo + ehi) / 2
            nxt = []
            for s, a, p0 in zip(x, acts, p0s, strict=True):
                if a < 0:
                    nxt.append(s)
                    continue
                k = int(emid >= p0)
                if fam.done[task, s, a, k]:
                    nxt.append(WIN if fam.win[task, s, a, k] else LOSS)
                else:
                    nxt.append(int(fam.nxt[task, s, a, k]))
            out.append(((hi - lo) * (ehi - elo), (nxt[0], nxt[1])))
    return out


def pair_law(
    fam: Family, pi: FloatArray, task: int, pre: tuple[int, int], post: tuple[int, int], coupling: Coupling
) -> dict[int, float]:
    """``P(D = d)`` for ``d`` in ``{-1, 0, 1}``; ``pre``/``post`` are ``(state, absolute turn)``."""
    (a, t_pre), (b, t_post) = pre, post
    horizon = int(fam.horizon[task])
    if coupling == "independent":
        v = win_probability(fam, pi, task, a, t_pre), win_probability(fam, pi, task, b, t_post)
        return {1: v[1] * (1 - v[0]), -1: v[0] * (1 - v[1]), 0: 1 - v[1] * (1 - v[0]) - v[0] * (1 - v[1])}
    dist: dict[tuple[int, int], float] = {(a, b): 1.0}
    clock = (t_pre, t_post) if coupling == "sequential" else (t_pre, t_pre)
    while any(s >= 0 for x in dist for s in x):
        new: dict[tuple[int, int], float] = defaultdict(float)
        t1, t2 = clock
        for x, p in dist.items():
            if coupling == "sequential":
                moving = (t1 < horizon, t2 < horizon)
            else:
                moving = (t1 < horizon, t_post <= t2 < horizon)
            timed = tuple(LOSS if s >= 0 and t >= horizon else s for s, t in zip(x, (t1, t2), strict=True))
            for q, y in _move(fam, pi, task, (timed[0], timed[1]), moving):
                new[y] += p * q
        dist = dict(new)
        clock = (t1 + 1, t2 + 1)
    law = {1: 0.0, 0: 0.0, -1: 0.0}
    for (x1, x2), p in dist.items():
        law[int(x2 == WIN) - int(x1 == WIN)] += p
    return law


def win_probability(fam: Family, pi: FloatArray, task: int, state: int, turn: int) -> float:
    """``V(state)`` with ``H - turn`` turns left, by :func:`family.values`."""
    v = values(fam.subset(np.array([task])), pi[[task]])
    return float(v[max(int(fam.horizon[task]) - turn, 0), 0, state])


def delta_moments(law: dict[int, float], k: int) -> tuple[float, float]:
    """``(E[Delta], Var(Delta))`` of the mean of ``k`` i.i.d. pairs with ``D ~ law``."""
    mean = law[1] - law[-1]
    var = law[1] + law[-1] - mean**2
    return mean, var / k


def acceptance(law: dict[int, float], k: int) -> tuple[float, float]:
    """``(P(Delta > 0), E[Delta 1{Delta > 0}])`` for ``k`` i.i.d. pairs: the false credit of a harmless segment."""
    dist = np.zeros(2 * k + 1)  # sum of D shifted by k
    dist[k] = 1.0
    for _ in range(k):
        dist = law[-1] * np.roll(dist, -1) + law[0] * dist + law[1] * np.roll(dist, 1)
    sums = np.arange(-k, k + 1)
    pos = sums > 0
    return float(dist[pos].sum()), float((dist[pos] * sums[pos] / k).sum())
