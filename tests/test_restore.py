"""Replay and snapshot restoration on the vault: exact states, typed errors, independent futures."""

import dataclasses
from typing import Any

import pytest

from prover_core import ReplayEnv, ReplayMismatchError, RestoreError, SnapshotEnv, Turn
from prover_core.demo import MDPEnv, VaultMDP, vault_policy
from prover_core.demo.run import rollout_batch, states_along
from prover_core.protocols import PolicyContext, policy_rng

MDP = VaultMDP()
TRAJ = max(rollout_batch(MDP, 2, 8, seed=4), key=lambda t: t.num_turns)


def play(episode, seed: int, turns: int = 40) -> list[object]:  # type: ignore[no-untyped-def]
    policy, rng, seen = vault_policy(), policy_rng(seed), []
    step = episode.last
    for _ in range(turns):
        if step.done:
            break
        action = policy.act(PolicyContext(None, (), step.observation, step.info, seed, rng))
        step = episode.step(action)
        seen.append((action, step.observation, step.done, step.success))
    return seen


@pytest.mark.parametrize("restorer", [ReplayEnv(lambda: MDPEnv(MDP)), SnapshotEnv(lambda: MDPEnv(MDP))])
def test_restore_reaches_the_recorded_state_at_every_turn(restorer) -> None:  # type: ignore[no-untyped-def]
    states = states_along(MDP, TRAJ)
    for t in range(TRAJ.num_turns):
        episode = restorer.restore(TRAJ, t, seed=7)
        assert episode.last.observation == TRAJ.turns[t].observation
        assert episode.env.state == states[t] and episode.env.turn == t


def test_replay_and_snapshot_continue_identically_under_the_same_seed() -> None:
    replay, snap = ReplayEnv(lambda: MDPEnv(MDP)), SnapshotEnv(lambda: MDPEnv(MDP))
    for t in (0, TRAJ.num_turns // 2, TRAJ.num_turns - 1):
        for seed in (1, 2, 3):
            assert play(replay.restore(TRAJ, t, seed), seed) == play(snap.restore(TRAJ, t, seed), seed)


def test_different_seeds_give_independent_futures_and_copies_do_not_share_state() -> None:
    snap = SnapshotEnv(lambda: MDPEnv(MDP))
    futures = {tuple(play(snap.restore(TRAJ, 0, seed), seed)) for seed in range(20)}
    assert len(futures) > 10
    a, b = snap.restore(TRAJ, 0, 1), snap.restore(TRAJ, 0, 1)
    a.step("go east")
    assert b.env.turn == 0 and a.env.turn == 1


def test_replay_mismatch_is_a_typed_error_naming_the_turn() -> None:
    turns = list(TRAJ.turns)
    turns[2] = Turn(observation="Room 9 of 7. Nowhere.", action=turns[2].action)
    bad = TRAJ.model_copy(update={"turns": tuple(turns)})
    with pytest.raises(ReplayMismatchError) as err:
        ReplayEnv(lambda: MDPEnv(MDP)).restore(bad, 4, seed=0)
    assert err.value.turn == 2 and "diverged at turn 2" in str(err.value)
    assert "observation_equal=" in str(err.value) and "SnapshotEnv(" in str(err.value)  # the remedies, named


def test_nondeterministic_environment_is_caught() -> None:
    other = dataclasses.replace(MDP, slip=0.9)  # same text, different dynamics: the replay drifts
    with pytest.raises(ReplayMismatchError):
        for t in range(TRAJ.num_turns):
            ReplayEnv(lambda: MDPEnv(other)).restore(TRAJ, t, seed=0)


def test_environment_errors_become_restore_errors() -> None:
    class Broken(MDPEnv):
        def step(self, action: str):  # type: ignore[no-untyped-def]
            raise OSError("simulator socket closed")

    with pytest.raises(RestoreError, match="simulator socket closed"):
        ReplayEnv(lambda: Broken(MDP)).restore(TRAJ, 3, seed=0)
    with pytest.raises(RestoreError, match=r"turns 0\.\."):
        ReplayEnv(lambda: MDPEnv(MDP)).restore(TRAJ, TRAJ.num_turns, seed=0)

    class Uncopyable(MDPEnv):
        def __deepcopy__(self, memo):  # type: ignore[no-untyped-def]
            raise TypeError("cannot pickle socket")

    with pytest.raises(RestoreError, match="copy"):
        SnapshotEnv(lambda: Uncopyable(MDP)).restore(TRAJ, 1, seed=0)


def test_snapshot_cache_is_bounded() -> None:
    snap = SnapshotEnv(lambda: MDPEnv(MDP), max_snapshots=2)
    for t in range(4):
        snap.restore(TRAJ, t, seed=0)
    assert len(snap._snapshots) == 2
    snap.clear()
    assert not snap._snapshots


@pytest.mark.parametrize("restorer", [ReplayEnv, SnapshotEnv])
def test_an_environment_without_reset_is_refused_not_skipped_group_by_group(restorer: Any) -> None:
    """``make_env`` returning an object with ``step`` but no ``reset``: the first restore raises a ``ProtocolError``
    naming what it returned, and ``compute_bonus`` raises it (a setup error), instead of skipping every group."""
    from prover_core import ChoiceJudge, ProtocolError, compute_bonus
    from prover_core.demo import VaultBatchPolicy
    from prover_core.demo.run import rollout_batch

    class NoReset:
        def step(self, action: str) -> None: ...

    with pytest.raises(ProtocolError, match=r"NoReset.*no reset"):
        restorer(NoReset).restore(TRAJ, 1, seed=0)
    with pytest.raises(ProtocolError, match="no reset"):
        compute_bonus(
            rollout_batch(MDP, 4, 8, 0), judge=ChoiceJudge(), env=restorer(NoReset), policy=VaultBatchPolicy()
        )
