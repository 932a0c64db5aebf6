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

from prover_core.data import Trajectory, Turn
from prover_core.errors import ProverError
from prover_core.protocols import Step
from prover_core.restore import Env

Chooser = Callable[[Step, np.random.Generator], Any]
"""``choose(step, rng) -> action``: how a rollout picks its action from the latest step."""


class RolloutLimitError(ProverError):
    """A rollout did not end within its turn limit (an episode needs a binary terminal outcome)."""


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
    """Play one episode of ``env`` from ``reset(spec)`` and record it.

    ``choose`` draws from ``np.random.default_rng(seed)``. Turn ``t`` records the observation seen
    before acting and the action taken, and in its ``info`` the entries of the step's info named in
    ``keep_info`` (say, the score before acting). Raises :class:`RolloutLimitError` when the episode is still
    running after ``max_turns`` turns.
    """
    rng = np.random.default_rng(seed)
    step = env.reset(spec)
    turns: list[Turn] = []
    while not step.done:
        if len(turns) >= max_turns:
            raise RolloutLimitError(f"episode {trajectory_id!r} did not end within {max_turns} turns")
        action = choose(step, rng)
        kept = {k: step.info[k] for k in keep_info if k in step.info}
        turns.append(Turn(observation=step.observation, action=action, info=kept))
        step = env.step(action)
    if not turns:
        raise RolloutLimitError(f"episode {trajectory_id!r} ended at reset: no turn to record")
    return Trajectory(id=trajectory_id, group_id=group_id, reset=dict(spec), turns=tuple(turns), success=step.success)


__all__ = ["Chooser", "RolloutLimitError", "rollout"]
