"""Free samples: who reached a boundary, the pooled rate, and their selection bias against exact values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from prover_bench import family as F
from prover_bench.free_samples import free_samples, matching_members, pooled_rate, reached, start_bias
from prover_core.data import Trajectory, Turn


def traj(tid: str, steps: list[tuple[str, str]], success: bool, reset: int = 0) -> Trajectory:
    turns = tuple(Turn(observation=o, action=a) for o, a in steps)
    return Trajectory(id=tid, group_id="g", reset={"seed": reset}, turns=turns, success=success)


REP = traj("rep", [("a", "x"), ("b", "y"), ("c", "z")], True)


def test_reached_needs_the_same_reset_turns_and_observation() -> None:
    same_prefix = traj("m1", [("a", "x"), ("b", "w"), ("d", "z")], False)
    assert reached(REP, same_prefix, 0) and reached(REP, same_prefix, 1)
    assert not reached(REP, same_prefix, 2)  # different action at turn 1
    other_reset = traj("m2", [("a", "x"), ("b", "y"), ("c", "z")], False, reset=1)
    assert not reached(REP, other_reset, 0)
    other_obs = traj("m3", [("a", "x"), ("q", "y")], False)
    assert reached(REP, other_obs, 0) and not reached(REP, other_obs, 1)
    short = traj("m4", [("a", "x")], False)
    assert not reached(REP, short, 1)
    assert not reached(REP, REP, 0)  # the representative is never its own free sample
    assert [m.id for m in free_samples(REP, [REP, same_prefix, other_reset, other_obs, short], 1)] == ["m1"]
    assert [m.id for m in free_samples(REP, [REP, same_prefix, other_reset, other_obs, short], 0)] == ["m1", "m3", "m4"]


def test_pooled_rate() -> None:
    free = [traj("f1", [("a", "x")], True), traj("f2", [("a", "x")], False)]
    assert pooled_rate(3, 6, free) == pytest.approx(4 / 8)
    assert pooled_rate(0, 0, free) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        pooled_rate(0, 0, [])


def test_matching_members_on_arrays() -> None:
    states = np.array([[0, 1, 2, 3], [0, 1, 2, 5], [0, 1, 4, -1], [0, 2, 2, 3]])
    actions = np.array([[0, 0, 1, 1], [0, 0, 1, 1], [0, 1, -1, -1], [0, 0, 1, 1]])
    length = np.array([4, 4, 2, 4])
    assert matching_members(states, actions, length, 0, [1, 2, 3], 0) == [1, 2, 3]
    assert matching_members(states, actions, length, 0, [1, 2, 3], 2) == [1]
    assert matching_members(states, actions, length, 0, [1, 2, 3], 3) == []  # member 1 is elsewhere at turn 3
    assert matching_members(states, actions, length, 2, [0], 2) == []  # the representative ended before turn 2


@pytest.mark.parametrize(("p", "g"), [(0.2, 8), (0.5, 8), (0.1, 6), (0.35, 5)])
def test_start_bias_by_enumerating_every_group(p: float, g: int) -> None:
    """Every outcome vector: trigger 0 < W/G < 1/2, the representative a success, the rest at s_0."""
    num = den = 0.0
    for outcome in itertools.product((0, 1), repeat=g):
        w = sum(outcome)
        if not 0 < w / g < 0.5:
            continue
        prob = math.prod(p if r else 1 - p for r in outcome)
        rep = outcome.index(1)
        others = [r for i, r in enumerate(outcome) if i != rep]
        num += prob * sum(others) / (g - 1)
        den += prob
    assert start_bias(p, g) == pytest.approx(num / den - p, abs=1e-12)
    assert start_bias(p, g) < 0


def test_start_bias_matches_the_sampler() -> None:
    """Groups of 8 on one task: the other members' success rate given the trigger is p + start_bias(p)."""
    fam = F.build(np.array([5]), np.array([[2, -1]]), np.array([1]), np.array([0.2]), np.array([10]))
    w = F.initial_weights()
    p = float(F.success(fam, w)[0])
    g, groups = 8, 40_000
    n = g * groups
    zero = np.zeros(n, dtype=np.int64)
    won = F.rollout(fam, F.policy(fam, w), zero, zero, zero, np.arange(n, dtype=np.uint64)).success.reshape(groups, g)
    wins = won.sum(axis=1)
    trig = (wins > 0) & (wins < g / 2)
    others = (wins[trig] - 1) / (g - 1)
    se = others.std() / math.sqrt(trig.sum())
    assert abs(others.mean() - (p + start_bias(p, g))) < 4.5 * se
    assert others.mean() < p - 10 * se  # the bias is real
    with pytest.raises(ValueError):
        start_bias(0.0, 8)
