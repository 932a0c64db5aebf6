"""A finite MDP compiled to arrays: a softmax table policy, exact values and fast samplers.

With ``pi`` the policy and ``h`` the turns left,

    V(s, 0) = 0,   V(s, h) = sum_a pi(a | o(s)) sum_{(p, s', done, win)} p * (win if done else V(s', h - 1)),

the recursion of :func:`prover_core.demo.exact_success_probability`, computed here for every
state and every ``h`` at once. The true advantage of turn ``t`` of an episode with states
``s_0..s_{T-1}`` and outcome ``R`` is ``V(s_{t+1}, H-t-1) - V(s_t, H-t)``, with ``V(s_T) = R``.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from prover_core.demo import FiniteMDP, TabularPolicy

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Trace = list[tuple[int, int]]
"""The ``(state, action)`` pairs of a continuation's policy turns (replayed turns excluded)."""


@dataclass
class Compiled:
    """Every reachable state of ``mdp`` with its observation, actions and transitions, as index arrays.

    Policy parameters are one logit per (observation, admissible action): ``theta[offset[o] + j]`` for
    action ``j`` of observation ``o``.
    """

    mdp: FiniteMDP
    states: list[Hashable]
    index: dict[Hashable, int]
    obs_of: IntArray  # state -> observation id
    observations: list[str]
    obs_actions: list[tuple[str, ...]]
    offset: IntArray  # observation id -> first parameter index
    # one row per (state, action, outcome)
    e_src: IntArray
    e_param: IntArray
    e_prob: FloatArray
    e_dst: IntArray
    e_done: NDArray[np.bool_]
    e_win: NDArray[np.bool_]
    # padded per-state tables for the samplers
    n_actions: IntArray
    out_start: IntArray  # (S, A_max): first outcome row of (state, action)
    out_count: IntArray
    _actions_cache: dict[int, tuple[str, ...]] = field(default_factory=dict)

    @property
    def horizon(self) -> int:
        return int(self.mdp.horizon)

    @property
    def n_params(self) -> int:
        return int(self.offset[-1])

    @property
    def initial(self) -> int:
        return self.index[self.mdp.initial({})]

    def actions(self, s: int) -> tuple[str, ...]:
        return self.obs_actions[int(self.obs_of[s])]


def compile_mdp(mdp: FiniteMDP) -> Compiled:
    """Enumerate the states reachable from ``mdp.initial({})`` and lay the MDP out as arrays.

    Raises ``ValueError`` if two states share an observation but not their admissible actions (a
    table policy over observations would then be ill-defined).
    """
    start = mdp.initial({})
    states, index, frontier = [start], {start: 0}, [start]
    while frontier:
        s = frontier.pop()
        for a in mdp.actions(s):
            for _, nxt, done, _ in mdp.transitions(s, a):
                if not done and nxt not in index:
                    index[nxt] = len(states)
                    states.append(nxt)
                    frontier.append(nxt)
    observations: list[str] = []
    obs_id: dict[str, int] = {}
    obs_actions: list[tuple[str, ...]] = []
    obs_of = np.zeros(len(states), dtype=np.int64)
    for i, s in enumerate(states):
        text, acts = mdp.observe(s), tuple(mdp.actions(s))
        if text not in obs_id:
            obs_id[text] = len(observations)
            observations.append(text)
            obs_actions.append(acts)
        elif obs_actions[obs_id[text]] != acts:
            raise ValueError(f"observation {text!r} is shared by states with different actions")
        obs_of[i] = obs_id[text]
    offset = np.concatenate([[0], np.cumsum([len(a) for a in obs_actions])]).astype(np.int64)
    a_max = max(len(a) for a in obs_actions)
    rows: list[tuple[int, int, float, int, bool, bool]] = []
    out_start = np.zeros((len(states), a_max), dtype=np.int64)
    out_count = np.zeros((len(states), a_max), dtype=np.int64)
    for i, s in enumerate(states):
        o = int(obs_of[i])
        for j, a in enumerate(obs_actions[o]):
            outcomes = mdp.transitions(s, a)
            out_start[i, j], out_count[i, j] = len(rows), len(outcomes)
            for p, nxt, done, win in outcomes:
                rows.append((i, int(offset[o]) + j, float(p), 0 if done else index[nxt], bool(done), bool(win)))
    cols = list(zip(*rows, strict=True))
    return Compiled(
        mdp=mdp,
        states=states,
        index=index,
        obs_of=obs_of,
        observations=observations,
        obs_actions=obs_actions,
        offset=offset,
        e_src=np.array(cols[0], dtype=np.int64),
        e_param=np.array(cols[1], dtype=np.int64),
        e_prob=np.array(cols[2], dtype=np.float64),
        e_dst=np.array(cols[3], dtype=np.int64),
        e_done=np.array(cols[4], dtype=bool),
        e_win=np.array(cols[5], dtype=bool),
        n_actions=np.array([len(obs_actions[int(o)]) for o in obs_of], dtype=np.int64),
        out_start=out_start,
        out_count=out_count,
    )


def logits_from_weights(c: Compiled, weights: Mapping[str, float]) -> FloatArray:
    """``theta`` with ``pi(a | o) ∝ weights[a]`` in every observation."""
    return np.array([np.log(weights[a]) for acts in c.obs_actions for a in acts], dtype=np.float64)


def action_probs(c: Compiled, theta: FloatArray) -> FloatArray:
    """``pi(a | o)`` for every parameter (softmax within each observation's block)."""
    if theta.shape != (c.n_params,):
        raise ValueError(f"theta must have shape ({c.n_params},), got {theta.shape}")
    block = np.repeat(np.arange(len(c.observations)), np.diff(c.offset))
    z = np.exp(theta - np.maximum.reduceat(theta, c.offset[:-1])[block])
    probs: FloatArray = z / np.add.reduceat(z, c.offset[:-1])[block]
    return probs


def value_table(c: Compiled, theta: FloatArray, horizon: int | None = None) -> FloatArray:
    """``V[h, s]``, the exact success probability of state ``s`` with ``h`` turns left, ``h = 0..horizon``."""
    horizon = c.horizon if horizon is None else horizon
    pi = action_probs(c, theta)
    w = pi[c.e_param] * c.e_prob
    win = np.bincount(c.e_src, weights=w * (c.e_done & c.e_win), minlength=len(c.states))
    go = w * ~c.e_done
    values = np.zeros((horizon + 1, len(c.states)))
    for h in range(1, horizon + 1):
        values[h] = win + np.bincount(c.e_src, weights=go * values[h - 1][c.e_dst], minlength=len(c.states))
    return values


def as_tabular_policy(c: Compiled, theta: FloatArray) -> TabularPolicy:
    """The same policy as a :class:`~prover_core.demo.TabularPolicy` (for the library's own env and policy)."""
    logits = {
        (c.observations[o], a): float(theta[c.offset[o] + j])
        for o, acts in enumerate(c.obs_actions)
        for j, a in enumerate(acts)
    }
    return TabularPolicy(lambda observation, action: logits[(observation, action)])


@dataclass
class Episodes:
    """``N`` recorded episodes: ``states[i, t]`` and ``actions[i, t]`` (action index) for ``t < length[i]``."""

    states: IntArray
    actions: IntArray
    length: IntArray
    success: NDArray[np.bool_]
    start_turn: IntArray  # the turn (clock) at which each episode started

    def __len__(self) -> int:
        return int(self.length.shape[0])


class Sampler:
    """Samples the policy ``theta`` in ``c``: many episodes in lockstep (numpy) or one at a time (Python)."""

    def __init__(self, c: Compiled, theta: FloatArray) -> None:
        self.c = c
        pi = action_probs(c, theta)
        a_max = c.out_start.shape[1]
        self.pi_cum = np.ones((len(c.states), a_max))
        for s in range(len(c.states)):
            o = int(c.obs_of[s])
            n = int(c.n_actions[s])
            self.pi_cum[s, :n] = np.cumsum(pi[c.offset[o] : c.offset[o] + n])
            self.pi_cum[s, n - 1] = 1.0
        k_max = int(c.out_count.max())
        idx = c.out_start[..., None] + np.minimum(np.arange(k_max), np.maximum(c.out_count[..., None] - 1, 0))
        valid = np.arange(k_max) < c.out_count[..., None]
        cum = np.cumsum(np.where(valid, c.e_prob[idx], 0.0), axis=-1)
        self.t_cum = np.where(valid, cum, 1.0)
        self.t_cum[np.arange(len(c.states))[:, None], np.arange(a_max)[None, :], np.maximum(c.out_count - 1, 0)] = 1.0
        self.t_row = idx
        # Python lists for the one-at-a-time sampler
        self._pi = [self.pi_cum[s, : int(c.n_actions[s])].tolist() for s in range(len(c.states))]
        self._out = [
            [
                (
                    self.t_cum[s, j, : int(c.out_count[s, j])].tolist(),
                    [
                        (int(c.e_dst[r]), bool(c.e_done[r]), bool(c.e_win[r]))
                        for r in idx[s, j, : int(c.out_count[s, j])]
                    ],
                )
                for j in range(int(c.n_actions[s]))
            ]
            for s in range(len(c.states))
        ]

    def one(
        self, state: int, turns_left: int, rng: np.random.Generator, trace: Trace | None = None
    ) -> tuple[bool, int]:
        """One continuation from ``state`` with ``turns_left`` turns: ``(success, policy turns taken)``; the policy's
        ``(state, action)`` pairs are appended to ``trace`` when given."""
        if turns_left <= 0:
            return False, 0
        return self._walk(state, rng.random(2 * turns_left).tolist(), 0, turns_left, trace)

    def _walk(
        self, state: int, u: list[float], start: int, turns_left: int, trace: Trace | None = None
    ) -> tuple[bool, int]:
        """The policy from ``state`` at turn ``start`` of the uniforms ``u`` (``u[2t]`` picks turn ``t``'s action,
        ``u[2t+1]`` its transition): ``(success, policy turns)``; its ``(state, action)`` pairs go to ``trace``."""
        s = state
        for t in range(start, turns_left):
            pi = self._pi[s]
            a = min(bisect.bisect_right(pi, u[2 * t]), len(pi) - 1)
            if trace is not None:
                trace.append((s, a))
            cum, outs = self._out[s][a]
            dst, done, win = outs[min(bisect.bisect_right(cum, u[2 * t + 1]), len(cum) - 1)]
            if done:
                return win, t + 1 - start
            s = dst
        return False, turns_left - start

    def replay(
        self, path: list[int], actions: list[int], turns_left: int, rng: np.random.Generator, trace: Trace | None = None
    ) -> tuple[bool, int]:
        """One continuation from ``path[0]`` that takes the recorded ``actions`` again with fresh transitions
        while it stays on the recorded states ``path``, then lets the policy act: ``(success, policy turns)``.

        It draws the same uniforms as :meth:`one` with the same ``rng`` and uses them the same way (a replayed
        turn skips its action's number), so a pre continuation whose policy takes the recorded action meets the
        same transitions: paired seeds give common random numbers.
        """
        if turns_left <= 0:
            return False, 0
        u = rng.random(2 * turns_left).tolist()
        s = path[0]
        for t, a in enumerate(actions[:turns_left]):
            cum, outs = self._out[s][a]
            s, done, win = outs[min(bisect.bisect_right(cum, u[2 * t + 1]), len(cum) - 1)]
            if done:
                return win, 0
            if t + 1 < len(path) and s != path[t + 1]:
                return self._walk(s, u, t + 1, turns_left, trace)  # left the recorded path
        return self._walk(s, u, min(len(actions), turns_left), turns_left, trace)

    def many(self, states: IntArray, turns_left: IntArray, rng: np.random.Generator, record: bool = False) -> Episodes:
        """Episodes from each ``states[i]`` with ``turns_left[i]`` turns, simulated in lockstep."""
        n = int(states.shape[0])
        h_max = int(turns_left.max()) if n else 0
        s = states.astype(np.int64).copy()
        alive = turns_left > 0
        length = np.zeros(n, dtype=np.int64)
        success = np.zeros(n, dtype=bool)
        rec_s = np.full((n, h_max if record else 0), -1, dtype=np.int64)
        rec_a = np.full((n, h_max if record else 0), -1, dtype=np.int64)
        for t in range(h_max):
            alive &= t < turns_left
            if not alive.any():
                break
            u = rng.random((2, n))
            a = np.minimum((u[0][:, None] >= self.pi_cum[s]).sum(axis=1), self.c.n_actions[s] - 1)
            k = np.minimum((u[1][:, None] >= self.t_cum[s, a]).sum(axis=1), self.c.out_count[s, a] - 1)
            r = self.t_row[s, a, k]
            if record:
                rec_s[alive, t] = s[alive]
                rec_a[alive, t] = a[alive]
            length[alive] += 1
            done = self.c.e_done[r] & alive
            success |= done & self.c.e_win[r]
            alive &= ~done
            s = np.where(alive, self.c.e_dst[r], s)
        return Episodes(rec_s, rec_a, length, success, self.c.horizon - turns_left)
