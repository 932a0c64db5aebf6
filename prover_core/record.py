"""Recording episodes as :class:`Trajectory` objects (for demos, tests and simple agent loops)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from prover_core.data import Trajectory, Turn
from prover_core.errors import RolloutLimitError
from prover_core.protocols import Policy, PolicyContext, policy_rng
from prover_core.restore import Env

__all__ = ["record_episode"]


def record_episode(
    env: Env,
    policy: Policy,
    *,
    reset: Mapping[str, Any],
    trajectory_id: str,
    group_id: str,
    seed: int,
    max_turns: int = 100,
    token_length: Callable[[Any], int] | None = None,
    keep_info: Sequence[str] = (),
    rng: np.random.Generator | None = None,
) -> Trajectory:
    """Play one episode of a synchronous ``policy`` from ``env.reset(reset)`` and record it.

    The policy draws from ``rng`` (default ``policy_rng(seed)``, the stream continuations use).

    Turn ``t`` records the observation seen before acting, the action, and in its ``info`` the entries
    of the step's info named in ``keep_info``. Raises :class:`RolloutLimitError` when the episode is
    still running after ``max_turns`` turns, or ended at reset with no turn to record.

    With ``token_length`` the turns get token spans of a synthetic sequence laid out as
    ``[obs_0][action_0][obs_1][action_1]...``: each action's span covers ``token_length(action)``
    positions right after its observation's ``token_length(observation)`` positions.
    """
    step = env.reset(reset)
    rng = policy_rng(seed) if rng is None else rng
    turns: list[Turn] = []
    cursor = 0
    while not step.done:
        if len(turns) >= max_turns:
            raise RolloutLimitError(f"episode {trajectory_id!r} did not end within {max_turns} turns")
        action = policy.act(PolicyContext(None, tuple(turns), step.observation, step.info, seed, rng))
        if inspect.isawaitable(action):
            raise TypeError("record_episode needs a synchronous policy")
        span = None
        if token_length is not None:
            start = cursor + token_length(step.observation)
            cursor = start + token_length(action)
            span = (start, cursor)
        kept = {k: step.info[k] for k in keep_info if k in step.info}
        turns.append(Turn(observation=step.observation, action=action, token_span=span, info=kept))
        step = env.step(action)
    if not turns:
        raise RolloutLimitError(f"episode {trajectory_id!r} ended at reset: no turn to record")
    return Trajectory(id=trajectory_id, group_id=group_id, reset=dict(reset), turns=tuple(turns), success=step.success)
