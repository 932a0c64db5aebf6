"""Real environments as restorable environments, and a rollout helper shared by them.

* :mod:`prover_envs.gymnasium`: any gymnasium environment (extra ``gym``).
* :mod:`prover_envs.textworld`: TextWorld text games generated locally (extra ``textworld``).

Both modules import their host library only when an environment is made, so importing them is cheap
and never fails. :func:`rollout` records one episode of a plain :class:`~prover_core.restore.Env` as
a :class:`~prover_core.data.Trajectory` whose ``reset`` spec re-creates it, played by a
:class:`~prover_core.protocols.Policy`: the same object that ``compute_bonus`` continues with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from prover_core.data import Trajectory
from prover_core.errors import RolloutLimitError
from prover_core.protocols import Policy
from prover_core.record import record_episode
from prover_core.restore import Env


def rollout(
    env: Env,
    spec: Mapping[str, Any],
    policy: Policy,
    *,
    trajectory_id: str,
    group_id: str,
    seed: int,
    max_turns: int = 1000,
    keep_info: Sequence[str] = (),
) -> Trajectory:
    """Play one episode of ``env`` from ``reset(spec)`` with ``policy`` and record it
    (:func:`~prover_core.record.record_episode`).

    ``policy.act(context)`` draws from ``context.rng = np.random.default_rng(seed)``. Turn ``t``
    records the observation seen before acting and the action taken, and in its ``info`` the entries
    of the step's info named in ``keep_info`` (say, the score before acting). Raises
    :class:`RolloutLimitError` when the episode is still running after ``max_turns`` turns.
    """
    return record_episode(
        env,
        policy,
        reset=spec,
        trajectory_id=trajectory_id,
        group_id=group_id,
        seed=seed,
        max_turns=max_turns,
        keep_info=keep_info,
        rng=np.random.default_rng(seed),
    )


__version__ = "0.1.0"

__all__ = ["RolloutLimitError", "rollout"]
