"""Turn-keyed common random numbers in the library: the policy's and the environment's draws at turn t."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import pytest

from prover_core import ProverConfig, ReplayEnv, SnapshotEnv, Trajectory
from prover_core.bonus import compute_bonus
from prover_core.continuations import env_continuer
from prover_core.demo import MDPEnv, VaultMDP, vault_policy
from prover_core.demo.run import rollout_batch
from prover_core.errors import RestoreError
from prover_core.judges import DivergenceJudge
from prover_core.pairing import ENV_STREAM, TurnKeyedEnv, TurnKeyedPolicy, paired, turn_rng, turn_seed
from prover_core.protocols import PolicyContext, Step

MDP = VaultMDP()


class Recording(MDPEnv):
    """The vault env, logging every reseed and the turn of every step."""

    log: ClassVar[list[tuple[str, int]]] = []

    def reseed(self, seed: int) -> None:
        Recording.log.append(("reseed", seed))
        super().reseed(seed)

    def step(self, action: str) -> Step:
        Recording.log.append(("step", self.turn))
        return super().step(action)


class Draws:
    """A policy that acts like the vault policy and records (turn, first draw of its rng)."""

    def __init__(self) -> None:
        self.inner = vault_policy()
        self.seen: list[tuple[int, float]] = []

    def act(self, context: PolicyContext) -> str:
        probe = np.random.Generator(np.random.PCG64())
        probe.bit_generator.state = context.rng.bit_generator.state
        self.seen.append((len(context.history), float(probe.random())))
        return self.inner.act(context)


@pytest.fixture(scope="module")
def success() -> Trajectory:
    return next(t for t in rollout_batch(MDP, 8, 8, seed=1) if t.success)


def test_turn_seed_and_rng_depend_on_seed_turn_and_stream_only() -> None:
    assert turn_seed(3, 5, ENV_STREAM) == turn_seed(3, 5, ENV_STREAM)
    assert (
        len({turn_seed(3, 5, ENV_STREAM), turn_seed(3, 6, ENV_STREAM), turn_seed(4, 5, ENV_STREAM), turn_seed(3, 5, 1)})
        == 4
    )
    assert 0 <= turn_seed(2**40, 7, ENV_STREAM) < 2**63
    assert turn_rng(3, 5).random() == turn_rng(3, 5).random() != turn_rng(3, 6).random()


@pytest.mark.parametrize("make", [ReplayEnv, SnapshotEnv])
def test_env_is_reseeded_per_absolute_turn_and_policy_draws_per_turn(success: Trajectory, make: Any) -> None:
    Recording.log = []
    policy = Draws()
    env, keyed = paired("turn", make(lambda: Recording(MDP)), policy)
    boundary, seed = 2, 11
    outcome = asyncio.run(env_continuer(env, keyed, 100)(success, boundary, seed))
    steps = [i for i, (kind, _) in enumerate(Recording.log) if kind == "step"]
    own = [Recording.log[i][1] for i in steps if Recording.log[i][1] >= boundary]
    assert own == list(range(boundary, boundary + outcome.turns))
    for i in steps:
        turn = Recording.log[i][1]
        if turn >= boundary:  # the continuation's own steps: reseeded just before, from (seed, turn)
            assert Recording.log[i - 1] == ("reseed", turn_seed(seed, turn, ENV_STREAM))
    assert [t for t, _ in policy.seen] == list(range(boundary, boundary + outcome.turns))
    assert [u for _, u in policy.seen] == [turn_rng(seed, t).random() for t, _ in policy.seen]


def test_pre_and_post_continuations_share_the_draws_of_each_absolute_turn(success: Trajectory) -> None:
    pre, post = Draws(), Draws()
    env = TurnKeyedEnv(SnapshotEnv(lambda: MDPEnv(MDP)))
    asyncio.run(env_continuer(env, TurnKeyedPolicy(pre), 100)(success, 1, 5))
    asyncio.run(env_continuer(env, TurnKeyedPolicy(post), 100)(success, 3, 5))
    common = dict(pre.seen).keys() & dict(post.seen).keys()
    assert common and all(dict(pre.seen)[t] == dict(post.seen)[t] for t in common)


def test_turn_pairing_without_reseed_is_a_restore_error(success: Trajectory) -> None:
    class Plain:
        def __init__(self) -> None:
            self.inner = MDPEnv(MDP)

        def reset(self, spec: Mapping[str, Any]) -> Step:
            return self.inner.reset(spec)

        def step(self, action: Any) -> Step:
            return self.inner.step(action)

    env = TurnKeyedEnv(ReplayEnv(Plain))
    with pytest.raises(RestoreError, match="reseed"):
        asyncio.run(env.restore(success, 1, 0))


def test_compute_bonus_with_turn_pairing_is_reproducible_and_differs_from_sequential() -> None:
    batch = rollout_batch(MDP, 4, 8, seed=3)

    def run(pairing: str) -> list[float]:
        config = ProverConfig(k=8, seed=1, pairing=pairing)  # type: ignore[arg-type]
        result = compute_bonus(
            batch, judge=DivergenceJudge(), env=SnapshotEnv(lambda: MDPEnv(MDP)), policy=vault_policy(), config=config
        )
        return [g.verification.delta for g in result.report.groups if g.verification is not None]

    turn = run("turn")
    assert turn and turn == run("turn")
    assert turn != run("sequential")
    assert paired("sequential", env := SnapshotEnv(lambda: MDPEnv(MDP)), pol := vault_policy()) == (env, pol)
