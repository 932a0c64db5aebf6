"""Common random numbers: pairing lowers Var(Delta) where the two boundaries' futures are alike."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from prover_core import ProverConfig, Segment, SnapshotEnv, Trajectory
from prover_core.continuations import env_continuer
from prover_core.demo import MDPEnv, VaultMDP, exact_success_probability, vault_policy
from prover_core.demo.run import rollout_batch, states_along
from prover_core.verify import continuation_seeds, verify_segment
from tests.verify_support import bernoulli, run_many

MDP = VaultMDP()
POLICY = vault_policy()
VALUE = exact_success_probability(MDP, POLICY)


def deltas(traj: Trajectory, seg: Segment, paired: bool, runs: int) -> np.ndarray:
    cont = env_continuer(SnapshotEnv(lambda: MDPEnv(MDP)), POLICY, 100)

    async def go() -> list[float]:
        out = await asyncio.gather(
            *(
                verify_segment(traj, seg, cont, ProverConfig(k=8, seed=s, paired_seeds=paired).stages.verify)
                for s in range(runs)
            )
        )
        return [v.delta for v in out]

    return np.array(asyncio.run(go()))


def exact_values(traj: Trajectory, seg: Segment) -> tuple[float, float]:
    states = states_along(MDP, traj)
    return VALUE(states[seg.start], MDP.horizon - seg.start), VALUE(states[seg.end + 1], MDP.horizon - seg.end - 1)


@pytest.fixture(scope="module")
def vault_run() -> Trajectory:
    return next(t for t in rollout_batch(MDP, 8, 8, seed=1) if t.success)


def test_vault_pairing_lowers_variance_on_a_zero_effect_turn(vault_run: Trajectory) -> None:
    """A 'look around' after taking the key changes V by under 0.01: with shared seeds both boundaries
    play out alike, so Var(Delta) drops well below the unpaired (exact) p(1-p)/K + q(1-q)/K."""
    traj = vault_run
    t = next(i for i, turn in enumerate(traj.turns) if turn.action == "look around" and i > 2)
    seg = Segment(trajectory_id=traj.id, start=t, end=t)
    v_pre, v_post = exact_values(traj, seg)
    assert abs(v_post - v_pre) < 0.02
    unpaired_exact = (v_pre * (1 - v_pre) + v_post * (1 - v_post)) / 8
    paired, unpaired = deltas(traj, seg, True, 300), deltas(traj, seg, False, 300)
    assert np.var(unpaired) == pytest.approx(unpaired_exact, rel=0.5)
    assert np.var(paired) < 0.6 * np.var(unpaired)
    assert abs(paired.mean() - (v_post - v_pre)) < 4 * paired.std() / np.sqrt(300)  # still unbiased


def test_vault_pairing_is_harmless_where_the_segment_changes_the_future(vault_run: Trajectory) -> None:
    """'take key' moves V from about 0.27 to 0.99: the futures differ, pairing neither helps nor hurts much."""
    traj = vault_run
    t = next(i for i, turn in enumerate(traj.turns) if turn.action == "take key")
    seg = Segment(trajectory_id=traj.id, start=t, end=t)
    v_pre, v_post = exact_values(traj, seg)
    exact = (v_pre * (1 - v_pre) + v_post * (1 - v_post)) / 8
    paired, unpaired = deltas(traj, seg, True, 200), deltas(traj, seg, False, 200)
    assert np.var(paired) == pytest.approx(exact, rel=0.4)
    assert np.var(unpaired) == pytest.approx(exact, rel=0.4)
    for d in (paired, unpaired):
        assert abs(d.mean() - (v_post - v_pre)) < 4 * d.std() / np.sqrt(200)


@pytest.mark.parametrize(("p_pre", "p_post"), [(0.3, 0.3), (0.3, 0.6), (0.7, 0.4)])
def test_shared_uniform_variance_is_exact(p_pre: float, p_post: float) -> None:
    """Pairs (1{u < p_pre}, 1{u < p_post}): D_i is +-1 w.p. |p_post - p_pre|, so
    Var(Delta) = g(1 - g)/K with g = |gap|, against (p(1-p) + q(1-q))/K unpaired."""
    runs, k = 1000, 8
    gap = abs(p_post - p_pre)
    paired = np.array([v.delta for v, _ in run_many(ProverConfig(curtail=False, k=k), bernoulli(p_pre, p_post), runs)])
    unpaired = np.array(
        [
            v.delta
            for v, _ in run_many(ProverConfig(curtail=False, k=k, paired_seeds=False), bernoulli(p_pre, p_post), runs)
        ]
    )
    exact_paired = gap * (1 - gap) / k
    exact_unpaired = (p_pre * (1 - p_pre) + p_post * (1 - p_post)) / k
    assert np.var(paired) == pytest.approx(exact_paired, abs=0.25 * exact_unpaired)
    assert np.var(unpaired) == pytest.approx(exact_unpaired, rel=0.15)
    assert np.var(paired) < 0.75 * np.var(unpaired)
    if gap == 0.0:
        assert not paired.any()  # identical futures: Delta = 0 in every run


def test_adaptive_pairs_reuse_the_fixed_seeds() -> None:
    cfg = ProverConfig(k=8, seed=5)
    pre8, post8 = continuation_seeds(cfg.stages.verify, "t")
    pre12, post12 = continuation_seeds(cfg.stages.verify, "t", 12)
    assert pre12[:8] == pre8 and post12[:8] == post8 and pre12 == post12
    unpaired = cfg.model_copy(update={"paired_seeds": False})
    pre, post = continuation_seeds(unpaired.stages.verify, "t", 12)
    assert pre[:8] == pre8 and set(pre).isdisjoint(post)
