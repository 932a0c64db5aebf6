"""Continuations as training data (``prover bench --only delta``): each continuation is an on-policy sample from
its boundary state, with the leave-one-out advantage ``A_c = R_c - mean of the other continuations there``."""

from __future__ import annotations

import numpy as np
import pytest

from prover_bench import methods
from prover_bench.batch import sample_batch
from prover_bench.delta_training import _gradient, environments
from prover_bench.tabular import Sampler, compile_mdp, value_table
from prover_bench.training import policy_gradient, score_sum
from prover_core.config import ProverConfig
from prover_core.judges import ChoiceJudge


def test_samples_by_hand() -> None:
    kept = methods.Continuations()
    kept.records += [
        (("x", 3, 0), 0, True, [(7, 0)]),  # alone at its boundary: advantage 0
        (("x", 1, 0), 1, False, [(5, 1)]),
        (("x", 1, 0), 0, True, [(5, 0), (6, 1)]),
    ]
    states, actions, adv, count = kept.samples()
    # ordered by boundary then seed: (x,1) seed 0 (1 - 0 = +1 on both turns), (x,1) seed 1 (0 - 1), (x,3) seed 0
    assert states.tolist() == [5, 6, 5, 7] and actions.tolist() == [0, 1, 1, 0]
    assert adv.tolist() == [1.0, 1.0, -1.0, 0.0] and count == 3


def test_leave_one_out_by_hand() -> None:
    success = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    boundary = np.array([0, 0, 0, 1, 1, 2])
    # boundary 0: 1 - 0, 0 - 1/2, 0 - 1/2; boundary 1: 1 - 1 twice; boundary 2 alone: 0
    assert methods.continuation_advantages(success, boundary) == pytest.approx([1.0, -0.5, -0.5, 0.0, 0.0, 0.0])


def test_continuations_estimate_the_exact_gradient_of_their_boundary_value() -> None:
    """``E[sum_t A_c grad log pi(a_t | o_t)] = grad_theta V(s, h)``: the Monte Carlo mean over continuations from
    ``s`` matches central finite differences of the exact value table, and an estimator without the ``-pi``
    term (a plausible slip) does not."""
    env = next(e for e in environments() if e.name == "luck-dominated slips")
    c = compile_mdp(env.make())
    theta = env.policy(c)
    sampler, rng = Sampler(c, theta), np.random.default_rng(5)
    n = 3000
    per: list[np.ndarray] = []
    kept = methods.Continuations()
    for seed in range(n):
        trace: list[tuple[int, int]] = []
        success, turns = sampler.one(c.initial, c.horizon, rng, trace)
        assert len(trace) == turns
        kept.records.append((("t", 0, 0), seed, success, trace))
    states, actions, adv, count = kept.samples()
    assert count == n
    ends = np.cumsum([len(r[3]) for r in sorted(kept.records, key=lambda r: r[1])])
    for lo, hi in zip(np.concatenate([[0], ends[:-1]]), ends, strict=True):
        per.append(score_sum(c, theta, states[lo:hi], actions[lo:hi], adv[lo:hi]))
    g = np.array(per)
    mean, se = g.mean(axis=0), g.std(axis=0, ddof=1) / np.sqrt(n)
    assert mean == pytest.approx(score_sum(c, theta, states, actions, adv) / n)
    eps = 1e-5
    exact = np.zeros(c.n_params)
    for j in range(c.n_params):
        step = np.zeros(c.n_params)
        step[j] = eps
        up, down = value_table(c, theta + step), value_table(c, theta - step)
        exact[j] = (up[c.horizon, c.initial] - down[c.horizon, c.initial]) / (2 * eps)
    assert np.abs(exact).max() > 0.05  # the value does depend on the logits here
    assert np.all(np.abs(mean - exact) <= 5 * se + 1e-6)
    # without the -pi(. | o) term the estimate is biased, and the test sees it
    slip = np.zeros(c.n_params)
    np.add.at(slip, c.offset[c.obs_of[states]] + actions, adv)
    assert np.any(np.abs(slip / n - exact) > 5 * se + 1e-6)


def test_the_hook_keeps_every_continuation_a_verification_ran() -> None:
    env = next(e for e in environments() if e.name == "traps")
    c = compile_mdp(env.make())
    theta = env.policy(c)
    batch = sample_batch(c, theta, 6, 8, np.random.default_rng(3))
    kept = methods.Continuations()
    credit = methods.prover(batch, ChoiceJudge(), Sampler(c, theta), ProverConfig(k=4), kept=kept)
    assert credit.verified > 0
    assert len(kept.records) == credit.continuations
    assert sum(len(r[3]) for r in kept.records) == credit.policy_turns  # every policy turn, nothing more
    index = {batch.trajectory_id(i): i for i in range(batch.n)}
    for (trajectory_id, turn, replay), _seed, _success, trace in kept.records:
        assert replay == 0
        if trace:  # each starts in the recorded state at its boundary
            assert trace[0][0] == batch.episodes.states[index[trajectory_id], turn]


def test_the_gradient_weighs_a_continuation_as_a_group_member() -> None:
    env = next(e for e in environments() if e.name == "traps")
    c = compile_mdp(env.make())
    theta = env.policy(c)
    batch = sample_batch(c, theta, 2, 8, np.random.default_rng(4))
    per_turn = methods.grpo(batch).per_turn
    plain = policy_gradient(c, theta, batch, per_turn)
    assert _gradient(c, theta, batch, per_turn, None) == pytest.approx(plain)
    assert _gradient(c, theta, batch, per_turn, methods.Continuations()) == pytest.approx(plain)
    kept = methods.Continuations()
    s0 = int(batch.episodes.states[0, 0])
    kept.records += [(("x", 0, 0), 0, True, [(s0, 0)]), (("x", 0, 0), 1, False, [(s0, 1)])]
    extra = score_sum(c, theta, np.array([s0, s0]), np.array([0, 1]), np.array([1.0, -1.0]))
    expected = (plain * batch.n + extra) / (batch.n + 2)
    assert _gradient(c, theta, batch, per_turn, kept) == pytest.approx(expected)
