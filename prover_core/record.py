"""Recording episodes as :class:`Trajectory` objects (for demos, tests and simple agent loops)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from prover_core.data import Trajectory, Turn
from prover_core.errors import ContinuationLimitError
from prover_core.protocols import Policy, PolicyContext, policy_rng
from prover_core.restore import Env


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
) -> Trajectory:
    """Play one episode of a synchronous ``policy`` from ``env.reset(reset)`` and record it.

    With ``token_length`` the turns get token spans of a synthetic sequence laid out as
    ``[obs_0][action_0][obs_1][action_1]...``: each action's span covers ``token_length(action)``
    positions right after its observation's ``token_length(observation)`` positions.
    """
    step = env.reset(reset)
    rng = policy_rng(seed)
    turns: list[Turn] = []
    cursor = 0
    for _ in range(max_turns):
        action = policy.act(PolicyContext(None, tuple(turns), step.observation, step.info, seed, rng))
        if inspect.isawaitable(action):
            raise TypeError("record_episode needs a synchronous policy")
        span = None
        if token_length is not None:
            start = cursor + token_length(step.observation)
            cursor = start + token_length(action)
            span = (start, cursor)
        turns.append(Turn(observation=step.observation, action=action, token_span=span))
        step = env.step(action)
        if step.done:
            return Trajectory(
                id=trajectory_id, group_id=group_id, reset=dict(reset), turns=tuple(turns), success=step.success
            )
    raise ContinuationLimitError(f"episode {trajectory_id!r} did not end within {max_turns} turns")
