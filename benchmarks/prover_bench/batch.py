"""A GRPO batch of recorded episodes, with the exact values and true per-turn advantages of its turns."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from prover_bench.tabular import Compiled, Episodes, FloatArray, IntArray, Sampler, value_table
from prover_core.data import Trajectory, Turn


@dataclass
class Batch:
    """``groups`` groups of ``group_size`` episodes of policy ``theta``, all from the initial state.

    Episode ``i`` belongs to group ``i // group_size`` and has id ``g{group:03d}-{member:02d}``.
    """

    c: Compiled
    theta: FloatArray
    episodes: Episodes
    group_size: int

    @property
    def n(self) -> int:
        return len(self.episodes)

    @property
    def groups(self) -> int:
        return self.n // self.group_size

    @property
    def reward(self) -> FloatArray:
        return self.episodes.success.astype(np.float64)

    @cached_property
    def values(self) -> FloatArray:
        """``V[h, s]`` of the policy that produced the batch."""
        return value_table(self.c, self.theta)

    @cached_property
    def mask(self) -> NDArray[np.bool_]:
        """``(N, H)``: True on the turns each episode actually took."""
        return np.arange(self.episodes.states.shape[1])[None, :] < self.episodes.length[:, None]

    def value_along(self) -> FloatArray:
        """``v[i, t] = V(s_t, H - t)`` for ``t < T_i``, ``v[i, T_i] = R_i`` (shape ``(N, H + 1)``, 0 after)."""
        ep, h = self.episodes, self.c.horizon
        width = ep.states.shape[1]
        turns_left = h - np.arange(width)[None, :]
        v = np.where(self.mask, self.values[np.clip(turns_left, 0, h), np.maximum(ep.states, 0)], 0.0)
        out = np.zeros((self.n, width + 1))
        out[:, :width] = v
        out[np.arange(self.n), ep.length] = self.reward
        return out

    @cached_property
    def true_advantage(self) -> FloatArray:
        """``A_t = V(s_{t+1}) - V(s_t)`` on every taken turn (0 elsewhere); sums to ``R - V(s_0)``."""
        v = self.value_along()
        adv: FloatArray = np.where(self.mask, v[:, 1:] - v[:, :-1], 0.0)
        return adv

    @cached_property
    def pivotal(self) -> NDArray[np.bool_]:
        """``(N, H)``: True on the turns that took a pivotal decision (:meth:`Corridor.is_pivotal`)."""
        c, ep = self.c, self.episodes
        is_pivotal = getattr(c.mdp, "is_pivotal", None)
        table = np.zeros((len(c.states), c.out_start.shape[1]), dtype=bool)
        if is_pivotal is not None:
            for s, state in enumerate(c.states):
                for j, a in enumerate(c.actions(s)):
                    table[s, j] = bool(is_pivotal(state, a))
        out: NDArray[np.bool_] = self.mask & table[np.maximum(ep.states, 0), np.maximum(ep.actions, 0)]
        return out

    def trajectory_id(self, i: int) -> str:
        return f"g{i // self.group_size:03d}-{i % self.group_size:02d}"

    def trajectories(self) -> list[Trajectory]:
        """The batch as library :class:`Trajectory` objects (text observations and actions)."""
        c, ep = self.c, self.episodes
        out = []
        for i in range(self.n):
            turns = tuple(
                Turn(
                    observation=c.observations[int(c.obs_of[s])],
                    action=c.actions(int(s))[int(a)],
                    token_span=(2 * t, 2 * t + 1),
                )
                for t, (s, a) in enumerate(
                    zip(ep.states[i, : ep.length[i]], ep.actions[i, : ep.length[i]], strict=True)
                )
            )
            out.append(
                Trajectory(
                    id=self.trajectory_id(i),
                    group_id=f"g{i // self.group_size:03d}",
                    reset={"seed": i},
                    turns=turns,
                    success=bool(ep.success[i]),
                )
            )
        return out

    def representatives(self, low: float = 0.0, high: float = 0.5) -> dict[int, int]:
        """Eligible group -> its representative episode: shortest success, ties to the lowest index (= id)."""
        out = {}
        for g in range(self.groups):
            members = range(g * self.group_size, (g + 1) * self.group_size)
            wins = [i for i in members if self.episodes.success[i]]
            if low < len(wins) / self.group_size < high:
                out[g] = min(wins, key=lambda i: (int(self.episodes.length[i]), i))
        return out


def sample_batch(c: Compiled, theta: FloatArray, groups: int, group_size: int, rng: np.random.Generator) -> Batch:
    """Roll out ``groups * group_size`` episodes of ``theta`` from the initial state."""
    n = groups * group_size
    starts: IntArray = np.full(n, c.initial, dtype=np.int64)
    episodes = Sampler(c, theta).many(starts, np.full(n, c.horizon, dtype=np.int64), rng, record=True)
    return Batch(c, theta, episodes, group_size)
