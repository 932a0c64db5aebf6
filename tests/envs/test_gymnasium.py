"""gymnasium environments restored by replay and by snapshot, deterministic and stochastic."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prover_core import ProverConfig, RandomJudge, ReplayMismatchError, RestoreError, Trajectory, Turn, compute_bonus
from prover_core.protocols import PolicyContext, Step
from prover_envs import RolloutLimitError, rollout
from prover_envs.gymnasium import GymEnv, copy_env, gym_spec, replay_env, snapshot_env, to_plain
from tests.hosts import require_host

require_host("gymnasium")  # the modules above import it lazily; skip (or fail in CI) without it

SPECS = {
    "frozenlake": gym_spec("FrozenLake-v1", 3, is_slippery=False),
    "frozenlake-slippery": gym_spec("FrozenLake-v1", 3, is_slippery=True),
    "taxi-rainy": gym_spec("Taxi-v4", 11, is_rainy=True, fickle_passenger=True),
    "cliff-slippery": gym_spec("CliffWalkingSlippery-v1", 5, max_episode_steps=60),
    "cartpole": gym_spec("CartPole-v1", 2),
}
STOCHASTIC = ["frozenlake-slippery", "taxi-rainy", "cliff-slippery"]


def uniform(step: Step, rng: np.random.Generator) -> int:
    actions = step.info["actions"]
    return int(actions[int(rng.integers(len(actions)))])


class Uniform:
    """The policy that plays ``uniform``: a uniformly random admissible action."""

    def act(self, context: PolicyContext) -> int:
        return uniform(Step(context.observation, info=context.info), context.rng)


class Always:
    """The policy that always plays one action."""

    def __init__(self, action: int) -> None:
        self.action = action

    def act(self, context: PolicyContext) -> int:
        return self.action


def record(name: str, seed: int = 0, min_turns: int = 6) -> Trajectory:
    """A random-action episode with at least ``min_turns`` turns (the first such policy seed from ``seed``)."""
    for s in range(seed, seed + 200):
        t = rollout(GymEnv(), SPECS[name], Uniform(), trajectory_id=f"{name}-{s}", group_id=name, seed=s)
        if t.num_turns >= min_turns:
            return t
    raise AssertionError(f"no episode of {name} lasted {min_turns} turns")


def play(env: Any, first: Step, actions: list[Any]) -> list[tuple[Any, bool, bool]]:
    """Observations and outcomes of ``actions`` from a live episode whose latest step is ``first``."""
    out = [(first.observation, first.done, first.success)]
    for a in actions:
        s = env.step(a)
        out.append((s.observation, s.done, s.success))
        if s.done:
            break
    return out


@pytest.mark.parametrize("name", list(SPECS))
def test_replay_restores_every_turn_and_the_recorded_future_follows(name: str) -> None:
    """Replay (no reseed) puts the environment, RNG included, exactly where the recording was."""
    t = record(name)
    actions = [x.action for x in t.turns]
    restorer = replay_env()
    for turn in sorted({*range(0, t.num_turns, max(1, t.num_turns // 15)), t.num_turns - 1}):
        episode = restorer.replay(t, turn)
        assert episode.last.observation == t.turns[turn].observation
        got = play(episode.env, episode.last, actions[turn:])
        assert [g[0] for g in got[:-1]] == [x.observation for x in t.turns[turn:]]
        assert got[-1][1] is True and got[-1][2] == t.success


@pytest.mark.parametrize("name", STOCHASTIC)
def test_snapshot_copy_continues_exactly_like_the_original(name: str) -> None:
    """A copy taken mid-episode carries the random generator: both futures are the same."""
    env = GymEnv()
    step = env.reset(SPECS[name])
    rng = np.random.default_rng(1)
    for _ in range(3):
        step = env.step(uniform(step, rng))
        assert not step.done
    twin = copy_env(env)
    actions = [int(a) for a in rng.integers(0, len(step.info["actions"]), size=40)]
    assert play(twin, step, actions) == play(env, step, actions)
    assert twin.env.unwrapped.P is env.env.unwrapped.P  # the read-only table is shared, not copied


@pytest.mark.parametrize("name", STOCHASTIC)
@pytest.mark.parametrize("restorer", ["replay", "snapshot"])
def test_restored_continuations_match_the_original_under_the_same_seed(name: str, restorer: str) -> None:
    """Original run to turn t, reseed(s), act on: exactly what restore(trajectory, t, s) then gives."""
    t = record(name, min_turns=8)
    env = replay_env() if restorer == "replay" else snapshot_env()
    future = [int(a) for a in np.random.default_rng(9).integers(0, 4, size=60)]
    for turn in (0, 1, t.num_turns // 2, t.num_turns - 1):
        for seed in (0, 7):
            original = GymEnv()
            step = original.reset(t.reset)
            for x in t.turns[:turn]:
                step = original.step(x.action)
            original.reseed(seed)
            expected = play(original, step, future)
            episode = env.restore(t, turn, seed)
            assert play(episode.env, episode.last, future) == expected


@pytest.mark.parametrize("name", STOCHASTIC)
def test_continuation_seeds_give_independent_futures(name: str) -> None:
    """Different seeds from one restored state give different futures; the same seed the same."""
    t = record(name, min_turns=4)
    env = snapshot_env()
    future = [int(a) for a in np.random.default_rng(3).integers(0, 4, size=60)]
    runs = {}
    for seed in range(6):
        episode = env.restore(t, 2, seed)
        runs[seed] = play(episode.env, episode.last, future)
    again = env.restore(t, 2, 4)
    assert play(again.env, again.last, future) == runs[4]
    assert len({repr(r) for r in runs.values()}) > 1


@settings(max_examples=30, deadline=None)
@given(turn=st.integers(0, 100), seed=st.integers(0, 2**32 - 1), policy_seed=st.integers(0, 50))
def test_replay_and_snapshot_restore_the_same_state(turn: int, seed: int, policy_seed: int) -> None:
    """At any turn and seed, both restorers hand out episodes with identical futures."""
    t = rollout(GymEnv(), SPECS["frozenlake-slippery"], Uniform(), trajectory_id="p", group_id="g", seed=policy_seed)
    turn = turn % t.num_turns
    future = [int(a) for a in np.random.default_rng(seed).integers(0, 4, size=30)]
    a = replay_env().restore(t, turn, seed)
    b = snapshot_env().restore(t, turn, seed)
    assert a.last == b.last
    assert play(a.env, a.last, future) == play(b.env, b.last, future)


def test_a_changed_observation_raises_replay_mismatch_at_that_turn() -> None:
    t = record("frozenlake-slippery", min_turns=5)
    turns = list(t.turns)
    turns[3] = Turn(observation=(turns[3].observation + 1) % 16, action=turns[3].action)
    tampered = t.model_copy(update={"turns": tuple(turns)})
    with pytest.raises(ReplayMismatchError) as err:
        replay_env().restore(tampered, 4, seed=0)
    assert err.value.turn == 3 and err.value.trajectory_id == t.id
    replay_env().restore(tampered, 2, seed=0)  # the turns before the change still restore
    with pytest.raises(ReplayMismatchError):
        snapshot_env().restore(tampered, 4, seed=0)


def test_a_different_reset_seed_raises_replay_mismatch() -> None:
    """Taxi's start depends on the seed: replaying under another seed is caught at turn 0."""
    t = record("taxi-rainy")
    wrong = t.model_copy(update={"reset": {**t.reset, "seed": t.reset["seed"] + 1}})
    with pytest.raises(ReplayMismatchError) as err:
        replay_env().restore(wrong, 2, seed=0)
    assert err.value.turn == 0


def test_a_spec_without_seed_cannot_be_restored() -> None:
    t = record("frozenlake")
    unseeded = t.model_copy(update={"reset": {"env_id": "FrozenLake-v1", "kwargs": {}}})
    with pytest.raises(RestoreError, match="integer 'seed'"):
        replay_env().restore(unseeded, 1, seed=0)
    with pytest.raises(TypeError):
        gym_spec("FrozenLake-v1", seed=1.5)  # type: ignore[arg-type]


def test_to_plain_makes_observations_hashable_python() -> None:
    assert to_plain(np.int64(3)) == 3 and type(to_plain(np.int64(3))) is int
    assert to_plain(np.array([[1.5, 2.0], [3.0, 4.0]], dtype=np.float32)) == ((1.5, 2.0), (3.0, 4.0))
    assert to_plain({"a": np.array([1, 2])}) == {"a": (1, 2)}
    hash(to_plain(np.zeros(4)))


def test_step_reports_binary_success_and_admissible_actions() -> None:
    env = GymEnv()
    step = env.reset(gym_spec("FrozenLake-v1", 0, is_slippery=False))
    assert step.info["actions"] == (0, 1, 2, 3) and not step.done
    for action in (1, 1, 2, 2, 1, 2):  # down, down, right, right, down, right: the 4x4 map's goal
        step = env.step(action)
    assert step.done and step.success and step.info["reward"] == 1.0
    hole = env.reset(gym_spec("FrozenLake-v1", 0, is_slippery=False))
    assert hole.observation == 0
    step = env.step(2)
    step = env.step(1)  # (1, 1) is a hole
    assert step.done and not step.success


def test_rollout_refuses_episodes_without_an_end() -> None:
    with pytest.raises(RolloutLimitError):
        rollout(
            GymEnv(),
            gym_spec("CliffWalking-v1", 0),
            Always(0),
            trajectory_id="x",
            group_id="g",
            seed=0,
            max_turns=20,
        )


def test_compute_bonus_verifies_identically_with_replay_and_snapshot() -> None:
    """The whole loop on FrozenLake slippery: both restorers give the same verification, seed for seed."""
    spec = gym_spec("FrozenLake-v1", 0, is_slippery=True)

    class TowardsGoal:
        """Down or right at random: one policy records the batch and continues it."""

        def act(self, context: PolicyContext) -> int:
            return int(context.rng.choice([1, 2]))

    batch = []
    for g in range(12):
        for i in range(8):
            batch.append(
                rollout(
                    GymEnv(),
                    {**spec, "seed": g},
                    TowardsGoal(),
                    trajectory_id=f"g{g}r{i}",
                    group_id=f"g{g}",
                    seed=100 * g + i,
                )
            )
    config = ProverConfig(k=8, seed=1)
    by_replay = compute_bonus(batch, judge=RandomJudge(0), env=replay_env(), policy=TowardsGoal(), config=config)
    by_snapshot = compute_bonus(batch, judge=RandomJudge(0), env=snapshot_env(), policy=TowardsGoal(), config=config)
    verified = [g for g in by_replay.report.groups if g.verification is not None]
    assert verified, "no group was eligible: the batch does not exercise verification"
    assert by_replay.report.groups == by_snapshot.report.groups
    assert not by_replay.report.skips


def test_a_policy_draws_from_the_documented_stream() -> None:
    """``context.rng`` is ``default_rng(seed)``: replaying the same draws gives the recorded actions."""
    spec = SPECS["frozenlake-slippery"]
    new = rollout(GymEnv(), spec, Uniform(), trajectory_id="t", group_id="g", seed=5)
    rng = np.random.default_rng(5)
    env = GymEnv()
    step = env.reset(spec)
    for turn in new.turns:
        assert turn.action == uniform(step, rng)
        step = env.step(turn.action)
    assert step.done and step.success == new.success


def test_a_reset_spec_may_not_choose_a_module_to_import(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46: gymnasium imports ``module`` for an id ``"module:Name"``; a trajectory's spec may not ask for it."""
    marker = tmp_path / "imported"
    (tmp_path / "prover_planted_module.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    env = GymEnv()
    with pytest.raises(ValueError, match="names a module to import"):
        env.reset(gym_spec("prover_planted_module:Planted-v0", 1))
    assert not marker.exists()
    listed = GymEnv(env_ids={"FrozenLake-v1"})
    assert listed.reset(gym_spec("FrozenLake-v1", 3)).observation == 0
    with pytest.raises(ValueError, match="not among env_ids"):
        listed.reset(gym_spec("CartPole-v1", 3))
    restored = replay_env(env_ids={"FrozenLake-v1"})
    spec = gym_spec("CartPole-v1", 3)
    bad = Trajectory(id="t", group_id="g", success=False, reset=spec, turns=[Turn(observation=0, action=1)])
    with pytest.raises((ValueError, RestoreError), match="not among env_ids"):
        restored.restore(bad, 0, seed=0)
