"""Common random numbers keyed by absolute turn (``ProverConfig.pairing = "turn"``).

With the default ``"sequential"`` pairing, continuation ``i`` from ``s_pre`` (turn ``l``) and from
``s_post`` (turn ``r + 1``) share one seed, and each draws its numbers in order: the ``j``-th own turn
of both uses the ``j``-th numbers. With ``"turn"`` pairing every draw is keyed by the absolute turn
``t`` it is made at,

    policy: turn_rng(seed, t, POLICY_STREAM),    environment: reseeded with turn_seed(seed, t, ENV_STREAM)
    before the step of turn t,

so once the pre continuation reaches the state the post continuation is in *at the same turn*, the
two coincide from then on. Each continuation's own draws are still independent across turns and
across seeds, so each boundary's success rate stays unbiased and ``E[Delta] = V(s_post) - V(s_pre)``.

Which pairing lowers ``Var(Delta)`` more depends on the segment (exact values on the benchmark's
tasks, docs/verification.md): a segment that leaves the state unchanged (``wait``) is coupled
perfectly by sequential pairing (both futures are the same run shifted by one turn), while a segment
doing what the policy would have done anyway (``go east``) is coupled by turn-keyed pairing (the pre
continuation catches up with the post one at the same turn) and barely by sequential pairing.

:class:`TurnKeyedEnv` and :class:`TurnKeyedPolicy` wrap any restorable environment (whose episodes
expose ``.env`` with ``reseed(seed)``, as :class:`~prover_core.restore.ReplayEnv` and
:class:`~prover_core.restore.SnapshotEnv` do) and any policy that samples from ``context.rng``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from prover_core._aio import resolve
from prover_core.data import Trajectory
from prover_core.errors import RestoreError
from prover_core.protocols import POLICY_STREAM, Episode, Policy, PolicyContext, RestorableEnv, Step

__all__ = [
    "ENV_STREAM",
    "Pairing",
    "TurnKeyedEnv",
    "TurnKeyedEpisode",
    "TurnKeyedPolicy",
    "paired",
    "turn_rng",
    "turn_seed",
]

Pairing = Literal["sequential", "turn"]
"""How continuations share random numbers: by call order (``sequential``) or keyed by turn (``turn``)."""
ENV_STREAM = 0x85EBCA6B
"""The stream of the environment's per-turn seeds (the policy's: :data:`~prover_core.protocols.POLICY_STREAM`)."""


def turn_seed(seed: int, turn: int, stream: int) -> int:
    """A 63-bit seed that depends only on ``(seed, turn, stream)``."""
    state = np.random.SeedSequence([seed, turn, stream]).generate_state(2, dtype=np.uint32)
    return int(state[0]) << 31 | int(state[1]) >> 1


def turn_rng(seed: int, turn: int, stream: int = POLICY_STREAM) -> np.random.Generator:
    """The generator of draws made at absolute ``turn`` by the continuation with ``seed`` on ``stream``."""
    return np.random.default_rng([seed, turn, stream])


@dataclass
class TurnKeyedEpisode:
    """An episode that reseeds its environment with ``turn_seed(seed, t, ENV_STREAM)`` before the step of turn ``t``."""

    episode: Any
    seed: int
    turn: int

    @property
    def last(self) -> Step:
        last: Step = self.episode.last
        return last

    async def step(self, action: Any) -> Step:
        self.episode.env.reseed(turn_seed(self.seed, self.turn, ENV_STREAM))
        self.turn += 1
        step: Step = await resolve(self.episode.step(action))
        return step


class TurnKeyedEnv:
    """A :class:`RestorableEnv` whose restored episodes draw the environment's randomness per absolute turn."""

    def __init__(self, env: RestorableEnv) -> None:
        self.env = env

    async def restore(self, trajectory: Trajectory, turn: int, seed: int) -> Episode:
        episode = await resolve(self.env.restore(trajectory, turn, seed))
        if getattr(getattr(episode, "env", None), "reseed", None) is None:
            raise RestoreError(
                "pairing='turn' needs restored episodes with .env.reseed(seed) "
                "(ReplayEnv and SnapshotEnv over an environment that defines reseed)"
            )
        return TurnKeyedEpisode(episode, seed, turn)


class TurnKeyedPolicy:
    """A :class:`Policy` acting with ``context.rng = turn_rng(seed, t, POLICY_STREAM)`` at absolute turn ``t``.

    ``t = len(context.history)``: the recorded turns before the boundary plus the continuation's own.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    async def act(self, context: PolicyContext) -> Any:
        keyed = dataclasses.replace(context, rng=turn_rng(context.seed, len(context.history)))
        return await resolve(self.policy.act(keyed))


def paired(pairing: Pairing, env: RestorableEnv, policy: Policy) -> tuple[RestorableEnv, Policy]:
    """``env`` and ``policy`` as ``pairing`` wants them (unchanged for ``"sequential"``)."""
    if pairing == "turn":
        return TurnKeyedEnv(env), TurnKeyedPolicy(policy)
    return env, policy
