"""Each benchmark method computes what it claims, on hand-worked batches."""

from __future__ import annotations

import numpy as np
import pytest

from prover_bench import methods
from prover_bench.accuracy import Tally
from prover_bench.batch import Batch
from prover_bench.progress import mean_ci
from prover_bench.suite import BASE_WEIGHTS, GO, OPEN, TAKE, Corridor
from prover_bench.tabular import Compiled, Episodes, Sampler, compile_mdp, logits_from_weights
from prover_bench.training import policy_gradient
from prover_core.config import ProverConfig
from prover_core.judges import DivergenceJudge

TINY = Corridor("tiny", sections=3, items=(1,), slip=0.0, horizon=6)
KEY = TAKE.format("brass key")
WIN = [((0, 0), GO), ((1, 0), KEY), ((1, 1), GO), ((2, 1), OPEN)]  # 4 turns, succeeds
LOSE = [((0, 0), GO), ((1, 0), GO), ((2, 0), OPEN)]  # 3 turns, fails: no key


def make_batch(c: Compiled, runs: list[list[tuple[tuple[int, int], str]]], wins: list[bool], size: int) -> Batch:
    width = c.horizon
    states = np.full((len(runs), width), -1, dtype=np.int64)
    actions = np.full((len(runs), width), -1, dtype=np.int64)
    for i, run in enumerate(runs):
        for t, (state, action) in enumerate(run):
            s = c.index[state]
            states[i, t], actions[i, t] = s, c.actions(s).index(action)
    episodes = Episodes(
        states, actions, np.array([len(r) for r in runs]), np.array(wins), np.zeros(len(runs), dtype=np.int64)
    )
    return Batch(c, logits_from_weights(c, BASE_WEIGHTS), episodes, size)


def table_estimator(c: Compiled, table: dict[tuple[int, int], float]) -> methods.Estimator:
    """``V^(s) = table[s]`` whatever the turns left; one 'continuation' per request."""

    def estimate(states: np.ndarray, turns_left: np.ndarray) -> tuple[np.ndarray, int, int]:
        return np.array([table[c.states[int(s)]] for s in states]), int(states.size), 0

    return estimate


V_HAT = {(0, 0): 0.2, (1, 0): 0.3, (1, 1): 0.9, (2, 1): 0.95, (2, 0): 0.0}


@pytest.fixture
def pair() -> Batch:
    c = compile_mdp(TINY)
    return make_batch(c, [WIN, LOSE], [True, False], 2)


def test_grpo_copies_the_centred_outcome_to_every_turn(pair: Batch) -> None:
    credit = methods.grpo(pair).per_turn
    assert credit[0, :4].tolist() == [0.5] * 4 and credit[1, :3].tolist() == [-0.5] * 3
    assert np.all(credit[0, 4:] == 0.0) and np.all(credit[1, 3:] == 0.0)


def test_vineppo_is_the_difference_of_successive_values(pair: Batch) -> None:
    credit = methods.vineppo(pair, table_estimator(pair.c, V_HAT))
    assert credit.per_turn[0, :4] == pytest.approx([0.1, 0.6, 0.05, 0.05])  # ..., 1 - 0.95 at the end
    assert credit.per_turn[1, :3] == pytest.approx([0.1, -0.3, 0.0])  # V^ = 0 then R = 0
    assert credit.continuations == 7  # one estimate per taken turn
    # only some runs: the others keep GRPO
    only = methods.vineppo(pair, table_estimator(pair.c, V_HAT), only=[1])
    assert only.per_turn[0, :4].tolist() == [0.5] * 4 and only.continuations == 3


def test_vineppo_with_exact_values_is_the_true_advantage(pair: Batch) -> None:
    credit = methods.vineppo(pair, methods.exact_estimator(pair))
    assert credit.per_turn == pytest.approx(pair.true_advantage)


def test_spo_chain_credits_fixed_segments(pair: Batch) -> None:
    credit = methods.spo_chain(pair, table_estimator(pair.c, V_HAT), every=2)
    # run 1: cut points 0, 2 and the end (T=4): V^ = 0.2, 0.9, R = 1
    assert credit.per_turn[0, :4] == pytest.approx([0.7, 0.7, 0.1, 0.1])
    # run 2: cut points 0, 2 and the end (T=3): V^ = 0.2, 0.0, R = 0
    assert credit.per_turn[1, :3] == pytest.approx([-0.2, -0.2, 0.0])
    assert credit.continuations == 4
    with pytest.raises(ValueError):
        methods.spo_chain(pair, table_estimator(pair.c, V_HAT), every=0)


def test_gigpo_centres_discounted_returns_within_anchor_states(pair: Batch) -> None:
    credit = methods.gigpo(pair, gamma=0.5, omega=1.0)
    # returns of the winner: 0.125, 0.25, 0.5, 1; the loser's are 0. Shared anchors: (0,0) and (1,0).
    assert credit.per_turn[0, :4] == pytest.approx([0.5 + 0.0625, 0.5 + 0.125, 0.5, 0.5])
    assert credit.per_turn[1, :3] == pytest.approx([-0.5 - 0.0625, -0.5 - 0.125, -0.5])
    assert credit.continuations == 0


def test_prover_credits_the_pivotal_turn_with_the_measured_delta() -> None:
    c = compile_mdp(TINY)
    batch = make_batch(c, [WIN, LOSE, LOSE, LOSE], [True, False, False, False], 4)
    # a near-deterministic policy that never takes the key: V(s_pre = (1,0)) = 0, V(s_post = (1,1)) = 1
    theta = np.zeros(c.n_params)
    for o, acts in enumerate(c.obs_actions):
        for j, a in enumerate(acts):
            theta[c.offset[o] + j] = {GO: 50.0, OPEN: 50.0}.get(a, -50.0)
    credit = methods.prover(batch, DivergenceJudge(), Sampler(c, theta), ProverConfig(k=8, seed=1))
    assert credit.focus == {0: (1, 1)} and credit.accepted == 1 and credit.verified == 1
    assert credit.per_turn[0, :4] == pytest.approx([0.75, 1.75, 0.75, 0.75])  # A_GRPO = 1 - 1/4, + Delta = 1
    assert credit.per_turn[1, :3] == pytest.approx([-0.25] * 3)
    assert credit.continuations == 16 and credit.policy_turns == 32  # go east + open door, from each boundary
    delta, exact = credit.deltas[0]
    assert delta == 1.0
    tally = Tally()
    tally.add(batch, credit)
    row = tally.row()
    assert row["localisation"] == 1.0 and row["acceptance"] == 1.0 and row["singled_out"] == 1.0
    assert row["continuations"] == 16 and row["extra_share"] == pytest.approx(32 / 13)
    assert isinstance(exact, float)


def test_top_credit_focus_ignores_the_terminal_turn_and_breaks_ties_early() -> None:
    assert methods._top(np.array([0.1, 0.5, 0.5, 9.0]), 4) == (1, 1)
    assert methods._top(np.array([0.1, 0.2, 0.9, 0.0, 0.0, 5.0]), 6, width=2) == (2, 3)
    assert methods._top(np.array([0.0, 0.0, 0.0, 0.3, 0.0, 5.0]), 5, width=2) == (2, 3)


def test_policy_gradient_matches_finite_differences(pair: Batch) -> None:
    c = pair.c
    credit = methods.vineppo(pair, table_estimator(c, V_HAT)).per_turn
    theta = np.random.default_rng(0).normal(size=c.n_params)

    def surrogate(th: np.ndarray) -> float:
        from prover_bench.tabular import action_probs

        p = action_probs(c, th)
        ep = pair.episodes
        idx = c.offset[c.obs_of[ep.states[pair.mask]]] + ep.actions[pair.mask]
        return float((credit[pair.mask] * np.log(p[idx])).sum() / pair.n)

    grad = policy_gradient(c, theta, pair, credit)
    eps = 1e-6
    numeric = [(surrogate(theta + eps * e) - surrogate(theta - eps * e)) / (2 * eps) for e in np.eye(c.n_params)]
    assert grad == pytest.approx(numeric, abs=1e-6)


def test_mean_ci_is_the_student_t_interval() -> None:
    assert mean_ci([1.0, 2.0, 3.0]) == pytest.approx((2.0, 4.303 / np.sqrt(3)))
    assert mean_ci([5.0]) == (5.0, 0.0)
    assert np.isnan(mean_ci([])[0])
