"""The benchmark environments and their exact values: hand-worked, against the demo's DP, against Monte Carlo."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prover_bench.batch import sample_batch
from prover_bench.suite import BASE_WEIGHTS, SUITE, Corridor, by_name
from prover_bench.tabular import (
    Sampler,
    action_probs,
    as_tabular_policy,
    compile_mdp,
    logits_from_weights,
    value_table,
)
from prover_core.demo import MDPEnv, exact_success_probability
from prover_core.record import record_episode

SMALL = Corridor("small", sections=5, items=(1,), fords=(2,), forks=(3,), slip=0.3, ford_risk=0.5, horizon=12)


def test_two_room_values_by_hand() -> None:
    # room 0: go east 4 / wait 1 / look 1 -> p(go) = 2/3; exit: open 4 / wait 1 / look 1 -> p(open) = 2/3.
    env = Corridor("two", sections=2, slip=0.0, horizon=3)
    c = compile_mdp(env)
    v = value_table(c, logits_from_weights(c, BASE_WEIGHTS))
    start, exit_ = c.index[(0, 0)], c.index[(1, 0)]
    assert v[1, exit_] == pytest.approx(2 / 3)
    assert v[2, exit_] == pytest.approx(2 / 3 + 1 / 3 * 2 / 3)  # 8/9
    assert v[1, start] == 0.0  # cannot reach the door and open it in one turn
    assert v[2, start] == pytest.approx(4 / 9)
    assert v[3, start] == pytest.approx(2 / 3 * 8 / 9 + 1 / 3 * 4 / 9)  # 20/27
    assert np.all(v[0] == 0.0)


def test_without_the_item_the_door_never_opens() -> None:
    c = compile_mdp(SMALL)
    v = value_table(c, logits_from_weights(c, BASE_WEIGHTS))
    past_item_empty_handed = [i for i, (room, carried) in enumerate(c.states) if room > 1 and carried == 0]
    assert past_item_empty_handed and np.all(v[:, past_item_empty_handed] == 0.0)


@pytest.mark.parametrize("env", [SMALL, by_name("key+ford"), by_name("hidden-key")], ids=lambda e: e.name)
def test_table_dp_equals_the_demo_recursion(env: Corridor) -> None:
    c = compile_mdp(env)
    rng = np.random.default_rng(3)
    theta = logits_from_weights(c, BASE_WEIGHTS) + rng.normal(0, 0.5, c.n_params)
    v = value_table(c, theta)
    exact = exact_success_probability(env, as_tabular_policy(c, theta))
    for i, s in enumerate(c.states):
        for h in (0, 1, 7, env.horizon):
            assert v[h, i] == pytest.approx(exact(s, h), abs=1e-12)


def test_probabilities_are_a_softmax_per_observation() -> None:
    c = compile_mdp(SMALL)
    theta = np.random.default_rng(0).normal(size=c.n_params)
    p = action_probs(c, theta)
    for o in range(len(c.observations)):
        block = slice(int(c.offset[o]), int(c.offset[o + 1]))
        z = np.exp(theta[block])
        assert p[block] == pytest.approx(z / z.sum())


def _within(estimate: float, p: float, n: int) -> bool:
    return abs(estimate - p) <= 4.5 * math.sqrt(max(p * (1 - p), 1e-4) / n)


def test_dp_matches_monte_carlo_from_several_states() -> None:
    c = compile_mdp(SMALL)
    theta = logits_from_weights(c, BASE_WEIGHTS)
    v = value_table(c, theta)
    sampler = Sampler(c, theta)
    rng = np.random.default_rng(11)
    n = 20_000
    for state, left in (((0, 0), 12), ((1, 0), 9), ((2, 1), 6), ((3, 1), 2)):
        s = c.index[state]
        many = sampler.many(np.full(n, s), np.full(n, left), rng)
        assert _within(float(many.success.mean()), float(v[left, s]), n), state
        ones = [sampler.one(s, left, rng)[0] for _ in range(4000)]
        assert _within(float(np.mean(ones)), float(v[left, s]), 4000), state


def test_dp_matches_the_library_environment_and_policy() -> None:
    """MDPEnv + TabularPolicy + record_episode (what compute_bonus would restore) agree with the DP."""
    c = compile_mdp(SMALL)
    theta = logits_from_weights(c, BASE_WEIGHTS)
    policy = as_tabular_policy(c, theta)
    n = 2500
    wins = sum(
        record_episode(MDPEnv(SMALL), policy, reset={"seed": i}, trajectory_id=f"t{i}", group_id="g", seed=i).success
        for i in range(n)
    )
    assert _within(wins / n, float(value_table(c, theta)[SMALL.horizon, c.initial]), n)


def test_recorded_episodes_and_true_advantages() -> None:
    c = compile_mdp(by_name("key"))
    batch = sample_batch(c, logits_from_weights(c, BASE_WEIGHTS), 4, 8, np.random.default_rng(0))
    v0 = batch.values[c.horizon, c.initial]
    # per episode the true advantages telescope to R - V(s_0)
    assert batch.true_advantage.sum(axis=1) == pytest.approx(batch.reward - v0)
    assert np.all(batch.true_advantage[~batch.mask] == 0.0)
    # in "key" every success took the key exactly once, and nothing else is pivotal there
    pivots = batch.pivotal.sum(axis=1)
    assert np.all(pivots[batch.episodes.success] == 1)
    assert batch.episodes.success.any() and not batch.episodes.success.all()
    assert np.all(batch.episodes.length <= c.horizon)
    trajs = batch.trajectories()
    assert [t.num_turns for t in trajs] == batch.episodes.length.tolist()
    assert trajs[0].turns[0].observation == c.observations[c.obs_of[c.initial]]


def test_suite_shape_and_validation() -> None:
    assert len(SUITE) >= 4
    for env in SUITE:
        assert 20 <= env.horizon <= 60 and 1 <= len(env.items) + len(env.fords) <= 2 and len(env.forks) >= 3
        c = compile_mdp(env)
        batch = sample_batch(c, logits_from_weights(c, BASE_WEIGHTS), 2, 8, np.random.default_rng(1))
        assert 15 <= float(batch.episodes.length.mean()) <= 50
    with pytest.raises(ValueError, match="distinct"):
        Corridor("bad", sections=5, items=(1,), forks=(1,))
    with pytest.raises(ValueError, match="before the exit"):
        Corridor("bad", sections=5, items=(4,))
    with pytest.raises(KeyError):
        by_name("nope")
    with pytest.raises(ValueError, match="theta"):
        action_probs(compile_mdp(SMALL), np.zeros(3))
