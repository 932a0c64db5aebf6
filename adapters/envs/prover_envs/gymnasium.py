"""Any gymnasium environment as a restorable environment (extra ``gym``: ``gymnasium>=1.0``).

An episode is named by a reset spec (see :func:`gym_spec`)::

    {"env_id": "FrozenLake-v1", "kwargs": {"is_slippery": True}, "seed": 7, "options": None}

:class:`GymEnv` is a plain :class:`~prover_core.restore.Env` over it: ``reset(spec)`` makes the
environment (once per id and kwargs) and resets it with ``seed``, so the episode's start and its
random generator are fixed; ``step`` maps gymnasium's five-tuple to a :class:`Step` whose binary
``success`` comes from ``success(reward, terminated, truncated, info)``. Then

* :func:`replay_env` restores by resetting with the recorded seed and replaying the recorded
  actions, checking every observation (a difference raises ``ReplayMismatchError``);
* :func:`snapshot_env` replays once per boundary and hands out deep copies, which carry the random
  generator's state, so stochastic transitions (FrozenLake slippery) continue exactly.

Both call :meth:`GymEnv.reseed` after restoring: the environment's future randomness
(``unwrapped.np_random``) then comes from the continuation's seed, so K continuations from one state
are independent and reproducible. gymnasium is imported when the first environment is made.

A reset spec comes from a trajectory, so it may not choose a module to import: gymnasium reads an id
``"module:Name-v0"`` as "import ``module``, then make ``Name-v0``", and such an id is refused unless it is
listed in ``env_ids`` (import the module yourself, which registers its environments, and name the registered
id). With ``env_ids`` given, every other id is refused too (docs/security.md).
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Collection, Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from prover_core.protocols import Step
from prover_core.restore import Env, ReplayEnv, SnapshotEnv

SuccessFn = Callable[[float, bool, bool, Mapping[str, Any]], bool]
"""``success(reward, terminated, truncated, info) -> bool``, asked on the step that ends the episode."""


def _gymnasium() -> ModuleType:
    try:
        return importlib.import_module("gymnasium")
    except ImportError as exc:
        raise ImportError("prover_envs.gymnasium needs gymnasium: pip install 'prover-envs[gym]'") from exc


def reached_goal(reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]) -> bool:
    """The default binary reward: the episode terminated (not truncated) on a positive reward.

    Right for FrozenLake (reward 1 at the goal) and Taxi (+20 on the drop-off); pass your own
    ``success`` for environments whose goal reward is not positive (CliffWalking: ``terminated``).
    """
    return bool(terminated) and reward > 0


def to_plain(value: Any) -> Any:
    """Observations as hashable plain Python: arrays become nested tuples, numpy scalars numbers.

    Plain observations compare with ``==`` (what replay checks), hash (what judges key on) and
    serialise with the trajectory.
    """
    if isinstance(value, np.ndarray):
        return to_plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple):
        return tuple(to_plain(v) for v in value)
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    return value


def gym_spec(env_id: str, seed: int, *, options: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """The reset spec of one episode: ``gym.make(env_id, **kwargs)`` reset with ``seed`` and ``options``."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(f"seed must be an int, got {seed!r}")
    return {"env_id": env_id, "kwargs": dict(kwargs), "seed": int(seed), "options": dict(options or {}) or None}


def _actions(space: Any) -> tuple[int, ...] | None:
    """The admissible actions of a ``Discrete`` space, else ``None``."""
    n, start = getattr(space, "n", None), getattr(space, "start", 0)
    if n is None or getattr(space, "shape", None) != ():
        return None
    return tuple(range(int(start), int(start) + int(n)))


class GymEnv:
    """A gymnasium environment behind the :class:`~prover_core.restore.Env` protocol.

    ``observe`` turns gymnasium observations into what trajectories record (default
    :func:`to_plain`). The environment is made on the first ``reset`` and kept while the spec's
    ``env_id`` and ``kwargs`` stay the same. ``env_ids``: the ids a reset spec may name (``None``: any id
    without a module to import; see the module docstring).
    """

    def __init__(
        self,
        *,
        success: SuccessFn = reached_goal,
        observe: Callable[[Any], Any] = to_plain,
        make: Callable[..., Any] | None = None,
        env_ids: Collection[str] | None = None,
    ) -> None:
        self.success = success
        self.observe = observe
        self._make = make
        self.env_ids = frozenset(env_ids) if env_ids is not None else None
        self.env: Any = None
        self._made: tuple[str, dict[str, Any]] | None = None

    def _ensure(self, env_id: str, kwargs: dict[str, Any]) -> Any:
        if self.env is None or self._made != (env_id, kwargs):
            self.close()
            make = self._make or _gymnasium().make
            self.env = make(env_id, **kwargs)
            self._made = (env_id, kwargs)
        return self.env

    def reset(self, spec: Mapping[str, Any]) -> Step:
        """``gym.make(spec["env_id"], **spec["kwargs"]).reset(seed=spec["seed"], options=spec["options"])``."""
        seed = spec.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
            raise ValueError(f"the reset spec needs an integer 'seed' to be replayable, got {seed!r}")
        env_id = spec.get("env_id")
        if not isinstance(env_id, str):
            raise ValueError(f"the reset spec needs an 'env_id' string, got {env_id!r}")
        self._check_id(env_id)
        env = self._ensure(env_id, dict(spec.get("kwargs") or {}))
        observation, info = env.reset(seed=int(seed), options=spec.get("options"))
        return Step(observation=self.observe(observation), info=self._info(info))

    def _check_id(self, env_id: str) -> None:
        """Refuse an id outside ``env_ids``, or (without ``env_ids``) one that names a module to import."""
        if self.env_ids is not None:
            if env_id not in self.env_ids:
                raise ValueError(f"the reset spec's env_id {env_id!r} is not among env_ids {sorted(self.env_ids)}")
        elif ":" in env_id and self._make is None:
            raise ValueError(
                f"the reset spec's env_id {env_id!r} names a module to import, which a reset spec may not choose: "
                "import the module yourself and name its registered id, or list this id in env_ids"
            )

    def step(self, action: Any) -> Step:
        if self.env is None:
            raise RuntimeError("step() before reset()")
        observation, reward, terminated, truncated, info = self.env.step(action)
        done = bool(terminated or truncated)
        success = done and bool(self.success(float(reward), bool(terminated), bool(truncated), info))
        extra = {"reward": float(reward), "terminated": bool(terminated), "truncated": bool(truncated)}
        return Step(observation=self.observe(observation), done=done, success=success, info=self._info(info, **extra))

    def _info(self, gym_info: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"gym_info": dict(gym_info), **extra}
        actions = _actions(self.env.action_space)
        if actions is not None:
            out["actions"] = actions
        return out

    def reseed(self, seed: int) -> None:
        """Reseed the environment's randomness from now on (``unwrapped.np_random``)."""
        if self.env is None:
            raise RuntimeError("reseed() before reset()")
        self.env.unwrapped.np_random = np.random.default_rng(seed)

    def close(self) -> None:
        """Close the gymnasium environment, if one is made (the restorers call this on every ``GymEnv`` they made)."""
        env, self.env, self._made = self.env, None, None
        if env is not None:
            env.close()


def copy_env(env: Env, share: Sequence[str] = ("P",)) -> GymEnv:
    """A deep copy of a :class:`GymEnv`, random generator and wrappers' counters included.

    Attributes of the unwrapped environment named in ``share`` (read-only tables such as the
    toy-text transition table ``P``) are shared rather than copied, which makes the copy cheap.
    """
    if not isinstance(env, GymEnv):
        raise TypeError(f"copy_env copies a GymEnv, got {type(env).__name__}")
    memo: dict[int, Any] = {}
    if env.env is not None:
        for name in share:
            value = getattr(env.env.unwrapped, name, None)
            if value is not None:
                memo[id(value)] = value
    return copy.deepcopy(env, memo)


def replay_env(
    *,
    success: SuccessFn = reached_goal,
    observe: Callable[[Any], Any] = to_plain,
    env_ids: Collection[str] | None = None,
) -> ReplayEnv:
    """Restore by reset with the recorded seed and replay of the recorded actions."""
    return ReplayEnv(lambda: GymEnv(success=success, observe=observe, env_ids=env_ids))


def snapshot_env(
    *,
    success: SuccessFn = reached_goal,
    observe: Callable[[Any], Any] = to_plain,
    share: Sequence[str] = ("P",),
    max_snapshots: int = 1024,
    env_ids: Collection[str] | None = None,
) -> SnapshotEnv:
    """Restore by copying a per-boundary snapshot (:func:`copy_env`), replaying to it the first time."""
    shared = tuple(share)
    return SnapshotEnv(
        lambda: GymEnv(success=success, observe=observe, env_ids=env_ids),
        copy_env=lambda env: copy_env(env, shared),
        max_snapshots=max_snapshots,
    )


__all__ = ["GymEnv", "SuccessFn", "copy_env", "gym_spec", "reached_goal", "replay_env", "snapshot_env", "to_plain"]
