"""Stage 3 against exact probabilities: Delta is unbiased, pairing, failures, acceptance."""

import asyncio
import math

import numpy as np
import pytest

from prover_core import ContinuationLimitError, Outcome, ProverConfig, Segment, SnapshotEnv
from prover_core.continuations import env_continuer, hook_continuer
from prover_core.demo import MDPEnv, VaultMDP, exact_success_probability, vault_policy
from prover_core.demo.run import rollout_batch, states_along
from prover_core.verify import continuation_seeds, verify_segment
from tests.conftest import make_trajectory

MDP = VaultMDP()


def bernoulli_continuer(p_by_turn: dict[int, float]):  # type: ignore[no-untyped-def]
    """R = 1 iff u < p(turn), with u drawn from the continuation's seed only (so pairing shares u)."""

    def go(trajectory, turn, seed):  # type: ignore[no-untyped-def]
        return bool(np.random.default_rng(seed).random() < p_by_turn[turn])

    return hook_continuer(go)


def verify(traj, seg, continuer, config):  # type: ignore[no-untyped-def]
    return asyncio.run(verify_segment(traj, seg, continuer, config.stages.verify))


def test_seeds_are_paired_stable_and_distinct() -> None:
    cfg = ProverConfig(k=8, seed=3)
    pre, post = continuation_seeds(cfg.stages.verify, "traj-1")
    assert pre == post and len(set(pre)) == 8
    assert continuation_seeds(cfg.stages.verify, "traj-1") == (pre, post)  # stable
    assert continuation_seeds(cfg.stages.verify, "traj-2")[0] != pre
    upre, upost = continuation_seeds(cfg.model_copy(update={"paired_seeds": False}).stages.verify, "traj-1")
    assert upre == pre and set(upre).isdisjoint(upost)


def test_delta_counts_and_acceptance_by_hand() -> None:
    traj = make_trajectory("a", "g", True, list("abcdef"))
    always = hook_continuer(lambda t, turn, seed: turn >= 3)  # fails before turn 3, succeeds from 3 on
    v = verify(traj, Segment(trajectory_id="a", start=1, end=2), always, ProverConfig(k=5))
    assert (v.pre_successes, v.pre_count, v.post_successes, v.post_count) == (0, 5, 5, 5)
    assert v.delta == 1.0 and v.accepted and not v.incomplete
    v = verify(traj, Segment(trajectory_id="a", start=3, end=4), always, ProverConfig(k=5))
    assert v.delta == 0.0 and not v.accepted  # Delta > 0 is strict


def test_delta_is_unbiased_for_exact_vault_values() -> None:
    """Mean of many independent K=8 Deltas matches V(s_post) - V(s_pre) computed exactly."""
    policy = vault_policy()
    value = exact_success_probability(MDP, policy)
    traj = next(t for t in rollout_batch(MDP, 8, 8, seed=1) if t.success)
    key_turn = next(i for i, turn in enumerate(traj.turns) if turn.action == "take key")
    seg = Segment(trajectory_id=traj.id, start=max(0, key_turn - 1), end=key_turn)
    states = states_along(MDP, traj)
    v_pre = value(states[seg.start], MDP.horizon - seg.start)
    v_post = value(states[seg.end + 1], MDP.horizon - seg.end - 1)
    continuer = env_continuer(SnapshotEnv(lambda: MDPEnv(MDP)), policy, 100)
    deltas, pre_rates, post_rates = [], [], []
    for s in range(120):
        v = verify(traj, seg, continuer, ProverConfig(k=8, seed=s, paired_seeds=False))
        deltas.append(v.delta)
        pre_rates.append(v.pre_rate)
        post_rates.append(v.post_rate)
    n = len(deltas) * 8
    sd_pre, sd_post = math.sqrt(v_pre * (1 - v_pre) / n), math.sqrt(v_post * (1 - v_post) / n)
    assert abs(np.mean(pre_rates) - v_pre) < 4 * sd_pre + 1e-9
    assert abs(np.mean(post_rates) - v_post) < 4 * sd_post + 1e-9
    assert abs(np.mean(deltas) - (v_post - v_pre)) < 4 * math.hypot(sd_pre, sd_post) + 1e-9


def test_common_random_numbers_lower_the_variance() -> None:
    traj = make_trajectory("a", "g", True, list("abcdef"))
    seg = Segment(trajectory_id="a", start=1, end=2)
    cont = bernoulli_continuer({1: 0.3, 3: 0.6})
    paired = [verify(traj, seg, cont, ProverConfig(k=8, seed=s)).delta for s in range(300)]
    unpaired = [verify(traj, seg, cont, ProverConfig(k=8, seed=s, paired_seeds=False)).delta for s in range(300)]
    assert min(paired) >= 0.0  # with shared u, R_post >= R_pre pairwise when p_post > p_pre
    assert min(unpaired) < 0.0
    # exact: Var paired = q(1-q)/K with q = 0.3; unpaired = (0.3*0.7 + 0.6*0.4)/K
    assert np.var(paired) < np.var(unpaired)
    assert abs(np.var(paired) - 0.3 * 0.7 / 8) < 0.01
    assert abs(np.var(unpaired) - (0.21 + 0.24) / 8) < 0.02


def test_failures_make_the_boundary_incomplete_and_name_the_error() -> None:
    traj = make_trajectory("a", "g", True, list("abcdef"))
    seg = Segment(trajectory_id="a", start=1, end=2)

    def flaky(t, turn, seed):  # type: ignore[no-untyped-def]
        if seed % 3 == 0:
            raise RuntimeError("simulator crashed")
        return turn >= 3

    seeds = continuation_seeds(ProverConfig(curtail=False, k=8).stages.verify, traj)[0]
    crashed = sum(s % 3 == 0 for s in seeds)
    assert crashed > 0
    v = verify(traj, seg, hook_continuer(flaky), ProverConfig(curtail=False, k=8))
    assert v.incomplete and not v.accepted and "simulator crashed" in v.reason
    assert v.failed_continuations == 2 * crashed and v.pre_count == 8 - crashed
    v = verify(traj, seg, hook_continuer(flaky), ProverConfig(curtail=False, k=8, min_finished=8 - crashed))
    assert v.accepted and not v.incomplete and v.delta == 1.0
    with pytest.raises(RuntimeError, match="simulator crashed"):
        verify(traj, seg, hook_continuer(flaky), ProverConfig(curtail=False, k=8, strict=True))


def test_never_ending_continuation_hits_the_turn_limit() -> None:
    class Forever:
        def act(self, context):  # type: ignore[no-untyped-def]
            return "wait"

    traj = next(t for t in rollout_batch(MDP, 4, 8, seed=0) if t.success)
    cont = env_continuer(SnapshotEnv(lambda: MDPEnv(VaultMDP(horizon=10_000))), Forever(), max_turns=25)
    v = verify(traj, Segment(trajectory_id=traj.id, start=0, end=0), cont, ProverConfig(curtail=False, k=2))
    assert v.incomplete and "ContinuationLimitError" in v.reason and v.failed_continuations == 4


def test_hook_rejects_non_binary_outcomes_and_counts_turns() -> None:
    traj = make_trajectory("a", "g", True, list("abc"))
    seg = Segment(trajectory_id="a", start=0, end=0)
    v = verify(traj, seg, hook_continuer(lambda t, turn, s: Outcome(success=turn == 1, turns=3)), ProverConfig(k=2))
    assert v.policy_turns == 12 and v.delta == 1.0
    v = verify(traj, seg, hook_continuer(lambda t, turn, s: 0.5), ProverConfig(k=2))
    assert v.incomplete and "bool or an Outcome" in v.reason


def test_terminal_post_boundary_uses_the_recorded_outcome() -> None:
    traj = make_trajectory("a", "g", True, list("abc"))
    cfg = ProverConfig(k=4, nonterminal_end=False)
    v = verify(traj, Segment(trajectory_id="a", start=2, end=2), hook_continuer(lambda t, turn, s: False), cfg)
    assert (v.pre_successes, v.post_successes, v.post_count) == (0, 4, 4)


def test_limit_error_is_typed() -> None:
    assert issubclass(ContinuationLimitError, Exception)
