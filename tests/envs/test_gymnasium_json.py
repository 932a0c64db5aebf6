"""Trajectories of gymnasium episodes survive JSON (``model_dump_json`` / ``model_validate_json``) and
still replay: tuple observations come back as lists, arrays as nested lists (issue 13, serialisation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from prover_core import Trajectory
from prover_core.protocols import PolicyContext
from prover_core.restore import ReplayEnv, SnapshotEnv
from prover_envs import rollout
from prover_envs.gymnasium import GymEnv, gym_spec, replay_env, snapshot_env, to_plain
from tests.hosts import require_host

require_host("gymnasium")


def taxi_tuple(state: Any) -> tuple[int, int, int, int]:
    """Taxi's integer state decoded to (row, col, passenger, destination), as an agent would see it."""
    s = int(state)
    return (s // 100, s // 20 % 5, s // 4 % 5, s % 4)


CASES: dict[str, tuple[dict[str, Any], Callable[[Any], Any]]] = {
    "blackjack (tuple)": (gym_spec("Blackjack-v1", 4), to_plain),
    "taxi (decoded tuple)": (gym_spec("Taxi-v4", 11, is_rainy=True, fickle_passenger=True), taxi_tuple),
    "frozenlake (tuple)": (gym_spec("FrozenLake-v1", 3, is_slippery=True), lambda s: (int(s) // 4, int(s) % 4)),
    "cartpole (raw array)": (gym_spec("CartPole-v1", 2), lambda o: o),
}


class Uniform:
    """A uniformly random admissible action."""

    def act(self, context: PolicyContext) -> int:
        actions = context.info["actions"]
        return int(actions[int(context.rng.integers(len(actions)))])


@pytest.mark.parametrize("name", list(CASES))
def test_a_trajectory_through_json_still_replays(name: str) -> None:
    spec, observe = CASES[name]
    recorded = max(
        (
            rollout(GymEnv(observe=observe), spec, Uniform(), trajectory_id=f"t{s}", group_id="g", seed=s)
            for s in range(8)
        ),
        key=lambda t: t.num_turns,
    )
    loaded = Trajectory.model_validate_json(recorded.model_dump_json())
    assert loaded.num_turns == recorded.num_turns
    if not isinstance(recorded.turns[0].observation, int | np.ndarray):
        assert isinstance(loaded.turns[0].observation, list)  # what JSON does to tuples
    restorers: list[ReplayEnv | SnapshotEnv] = [
        ReplayEnv(lambda: GymEnv(observe=observe)),
        SnapshotEnv(lambda: GymEnv(observe=observe)),
    ]
    if observe is to_plain:
        restorers += [replay_env(), snapshot_env()]
    for restorer in restorers:
        for trajectory in (recorded, loaded):
            for turn in sorted({0, trajectory.num_turns // 2, trajectory.num_turns - 1}):
                episode = restorer.restore(trajectory, turn, seed=turn)
                assert np.array_equal(
                    np.asarray(episode.last.observation), np.asarray(recorded.turns[turn].observation)
                )
