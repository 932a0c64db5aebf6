"""The gymnasium restorers close every gymnasium environment they make or copy, once, over a ``compute_bonus`` call."""

from __future__ import annotations

import gc
from collections import Counter
from typing import Any

from prover_core import ProverConfig, RandomJudge, ReplayEnv, SnapshotEnv, compute_bonus
from prover_core.protocols import Closable, PolicyContext
from prover_envs import rollout
from prover_envs.gymnasium import GymEnv, copy_env, gym_spec
from tests.hosts import require_host

gymnasium = require_host("gymnasium")

MADE: list[Any] = []
CLOSED: Counter[int] = Counter()


class Counted(gymnasium.Wrapper):  # type: ignore[misc]
    """A gymnasium wrapper that records itself when made or deep-copied and counts its closes."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        MADE.append(self)

    def __setstate__(self, state: dict[str, Any]) -> None:  # a deep copy (SnapshotEnv's copy_env)
        self.__dict__.update(state)
        MADE.append(self)

    def close(self) -> None:
        CLOSED[id(self)] += 1
        super().close()  # and the FrozenLake environment inside


def make(env_id: str, **kwargs: Any) -> Counted:
    return Counted(gymnasium.make(env_id, **kwargs))


class TowardsGoal:
    def act(self, context: PolicyContext) -> int:
        return int(context.rng.choice([1, 2]))


SPEC = gym_spec("FrozenLake-v1", 0, is_slippery=False)
BATCH = [
    rollout(GymEnv(), {**SPEC, "seed": g}, TowardsGoal(), trajectory_id=f"g{g}r{i}", group_id=f"g{g}", seed=100 * g + i)
    for g in range(4)
    for i in range(8)
]


def run(restorer: Any) -> None:
    MADE.clear()
    CLOSED.clear()
    result = compute_bonus(BATCH, judge=RandomJudge(0), env=restorer, policy=TowardsGoal(), config=ProverConfig(k=4))
    assert result.report.metrics(prefix="")["continuations"] > 0


def each_closed_once() -> bool:
    return bool(MADE) and [CLOSED[id(e)] for e in MADE] == [1] * len(MADE) and sum(CLOSED.values()) == len(MADE)


def test_gym_env_declares_the_close_hook() -> None:
    assert isinstance(GymEnv(), Closable)


def test_replay_closes_every_gymnasium_environment_it_made() -> None:
    run(ReplayEnv(lambda: GymEnv(make=make)))
    gc.collect()
    assert each_closed_once()


def test_snapshot_closes_its_copies_then_its_snapshots() -> None:
    with SnapshotEnv(lambda: GymEnv(make=make), copy_env=copy_env) as restorer:
        run(restorer)
        gc.collect()
        open_now = [e for e in MADE if not CLOSED[id(e)]]
        assert open_now and {id(e) for e in open_now} == {id(s.env.env) for s in restorer._snapshots.values()}
    assert each_closed_once()
