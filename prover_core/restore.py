"""Restoration helpers: turn a plain resettable environment into a :class:`RestorableEnv`.

* :class:`ReplayEnv` re-creates the state before turn ``t`` by resetting with the trajectory's
  recorded ``reset`` spec and replaying its actions ``0..t-1``, checking every observation against
  the record. A mismatch raises :class:`ReplayMismatchError`: continuing from a state that is not the
  recorded one would verify, and credit, the wrong thing.
* :class:`SnapshotEnv` replays once per boundary and then hands out copies of that snapshot, for
  environments whose state can be copied (``copy.deepcopy`` by default).

After restoring, both call ``env.reseed(seed)`` when the environment has it, so that the future
randomness of each continuation is its own (see :meth:`RestorableEnv.restore`).
"""

from __future__ import annotations

import copy
import operator
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from prover_core.data import Trajectory
from prover_core.errors import ProverError, ReplayMismatchError, RestoreError
from prover_core.protocols import Step


class Env(Protocol):
    """A plain environment that can be reset from a spec; the input of the restoration helpers.

    It may also define ``reseed(seed: int) -> None`` to reseed its randomness from now on; a
    stochastic environment without it gives every continuation from one snapshot the same future.
    """

    def reset(self, spec: Mapping[str, Any]) -> Step: ...

    def step(self, action: Any) -> Step: ...


@dataclass
class LiveEpisode:
    """An :class:`~prover_core.protocols.Episode` over a plain :class:`Env`."""

    env: Env
    last: Step

    def step(self, action: Any) -> Step:
        self.last = self.env.step(action)
        return self.last


def _reseed(env: Env, seed: int) -> None:
    reseed = getattr(env, "reseed", None)
    if reseed is not None:
        reseed(seed)


class ReplayEnv:
    """Restores by deterministic replay of the recorded actions, checking each observation."""

    def __init__(
        self,
        make_env: Callable[[], Env],
        observation_equal: Callable[[Any, Any], bool] = operator.eq,
    ) -> None:
        self.make_env = make_env
        self.observation_equal = observation_equal

    def replay(self, trajectory: Trajectory, turn: int) -> LiveEpisode:
        """A fresh episode in state ``s_turn``, or :class:`RestoreError` / :class:`ReplayMismatchError`."""
        if not 0 <= turn < trajectory.num_turns:
            raise RestoreError(
                f"cannot restore trajectory {trajectory.id!r} before turn {turn}: "
                f"it has turns 0..{trajectory.num_turns - 1}"
            )
        try:
            env = self.make_env()
            step = env.reset(trajectory.reset)
            for t in range(turn + 1):
                self._check(trajectory, t, step)
                if t < turn:
                    step = env.step(trajectory.turns[t].action)
        except ProverError:
            raise
        except Exception as exc:  # the user's environment failed: say where
            raise RestoreError(
                f"environment raised while restoring trajectory {trajectory.id!r} to turn {turn}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return LiveEpisode(env=env, last=step)

    def _check(self, trajectory: Trajectory, t: int, step: Step) -> None:
        expected = trajectory.turns[t].observation
        if not self.observation_equal(expected, step.observation):
            raise ReplayMismatchError(trajectory.id, t, expected, step.observation)
        if step.done:
            raise RestoreError(f"replay of trajectory {trajectory.id!r} ended before turn {t}")

    def restore(self, trajectory: Trajectory, turn: int, seed: int) -> LiveEpisode:
        episode = self.replay(trajectory, turn)
        _reseed(episode.env, seed)
        return episode


class SnapshotEnv:
    """Restores by copying a snapshot taken once per boundary (replaying to it the first time).

    ``copy_env`` copies a live environment exactly, including its random generator; ``max_snapshots``
    bounds the cache (least recently used snapshots are dropped).
    """

    def __init__(
        self,
        make_env: Callable[[], Env],
        copy_env: Callable[[Env], Env] = copy.deepcopy,
        observation_equal: Callable[[Any, Any], bool] = operator.eq,
        max_snapshots: int = 1024,
    ) -> None:
        self._replay = ReplayEnv(make_env, observation_equal)
        self.copy_env = copy_env
        self.max_snapshots = max_snapshots
        self._snapshots: OrderedDict[tuple[str, int], LiveEpisode] = OrderedDict()

    def snapshot(self, trajectory: Trajectory, turn: int) -> LiveEpisode:
        key = (trajectory.id, turn)
        if key in self._snapshots:
            self._snapshots.move_to_end(key)
            return self._snapshots[key]
        episode = self._replay.replay(trajectory, turn)
        self._snapshots[key] = episode
        if len(self._snapshots) > self.max_snapshots:
            self._snapshots.popitem(last=False)
        return episode

    def restore(self, trajectory: Trajectory, turn: int, seed: int) -> LiveEpisode:
        snap = self.snapshot(trajectory, turn)
        try:
            env = self.copy_env(snap.env)
        except Exception as exc:
            raise RestoreError(f"could not copy the environment snapshot: {type(exc).__name__}: {exc}") from exc
        _reseed(env, seed)
        return LiveEpisode(env=env, last=snap.last)

    def clear(self) -> None:
        """Drop every cached snapshot (call between training steps)."""
        self._snapshots.clear()
