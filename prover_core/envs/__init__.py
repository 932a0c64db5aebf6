"""Real environments as restorable environments, and a rollout helper shared by them.

* :mod:`prover_core.envs.gymnasium`: any gymnasium environment (extra ``gym``).
* :mod:`prover_core.envs.textworld`: TextWorld text games generated locally (extra ``textworld``).

Both modules import their host library only when an environment is made, so importing them is cheap
and never fails. :func:`rollout` records one episode of a plain :class:`~prover_core.restore.Env` as
a :class:`~prover_core.data.Trajectory` whose ``reset`` spec re-creates it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from prover_core.data import Trajectory
from prover_core.errors import RolloutLimitError
from prover_core.protocols import PolicyContext, Step
from prover_core.record import record_episode
from prover_core.restore import Env

Chooser = Callable[[Step, np.random.Generator], Any]
"""``choose(step, rng) -> action``: how a rollout picks its action from the latest step."""


class _Choosing:
    """A :class:`~prover_core.protocols.Policy` over a chooser, drawing from ``default_rng(seed)``."""

    def __init__(self, choose: Chooser, seed: int) -> None:
        self.choose, self.rng = choose, np.random.default_rng(seed)

    def act(self, context: PolicyContext) -> Any:
        return self.choose(Step(context.observation, info=context.info), self.rng)


def rollout(
    env: Env,
    spec: Mapping[str, Any],
    choose: Chooser,
    *,
    trajectory_id: str,
    group_id: str,
    seed: int,
    max_turns: int = 1000,
    keep_info: Sequence[str] = (),
) -> Trajectory:
    """Play one episode of ``env`` from ``reset(spec)`` and record it (:func:`~prover_core.record.record_episode`).

    ``choose`` draws from ``np.random.default_rng(seed)``. Turn ``t`` records the observation seen
    before acting and the action taken, and in its ``info`` the entries of the step's info named in
    ``keep_info`` (say, the score before acting). Raises :class:`RolloutLimitError` when the episode is still
    running after ``max_turns`` turns.
    """
    return record_episode(
        env,
        _Choosing(choose, seed),
        reset=spec,
        trajectory_id=trajectory_id,
        group_id=group_id,
        seed=seed,
        max_turns=max_turns,
        keep_info=keep_info,
    )


__all__ = ["Chooser", "RolloutLimitError", "rollout"]
