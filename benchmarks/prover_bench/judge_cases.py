"""The judge harness's environments: recorded groups with the true pivot turns of every run.

A :class:`Case` is a batch of groups of one environment, with

* ``pivots[trajectory_id]``: the turns whose decision is known to matter (the truth localisation uses);
* ``continuations``: how verification continues the same policy from any recorded state;
* ``gain(trajectory_id, start, end)``: the exact ``V(s_{end+1}) - V(s_start)`` where values are exact.

Three families:

* **Tabular** (exact values by dynamic programming, :mod:`prover_bench.tabular`): corridors built
  for this harness (:data:`CORRIDORS`: a hidden pivot, two pivots both needed, a slip-dominated
  corridor, traps, a policy that mostly takes the pivot so failed runs take it too), where a pivot is
  what :meth:`Corridor.is_pivotal` says; and gymnasium's toy-text tables (:data:`TOY_TEXT`:
  FrozenLake slippery, Taxi rainy, CliffWalking slippery, compiled from the environment's own
  transition table ``P``), where a pivot is a decision that avoided losing at least ``PIVOT_GAP`` of
  success probability: ``Q_h(s_t, a_t) - min_b Q_h(s_t, b) >= 0.15``, ``h`` the turns left, ``Q`` the
  exact values of the policy that played.
* **TextWorld** ``tw-cooking`` games of several kinds (:data:`TEXTWORLD`), played by an epsilon-greedy
  walkthrough follower; a pivot is a command that raised the game's score (the game's own milestones).
  No exact values: ``gain`` is ``None``.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prover_bench.batch import Batch, sample_batch
from prover_bench.luck import PitCorridor
from prover_bench.methods import tabular_hook
from prover_bench.suite import BASE_WEIGHTS, Corridor
from prover_bench.tabular import (
    Compiled,
    FloatArray,
    Sampler,
    action_probs,
    compile_mdp,
    logits_from_weights,
    value_table,
)
from prover_core.data import Outcome, Trajectory
from prover_core.demo import Transition

PIVOT_GAP = 0.15
"""The decision gap ``Q_h(s, a) - min_b Q_h(s, b)`` from which a toy-text turn counts as a pivot."""

NO_EFFECT = 0.05
"""A turn whose choice moved the success probability by less than this (``|Q_h(s, a) - V_h(s)|``) had no effect."""

ContinueFrom = Callable[[Trajectory, int, int], Outcome]


@dataclass
class Case:
    """Recorded groups of one environment with their truth (see the module docstring)."""

    name: str
    kind: str
    trajectories: list[Trajectory]
    pivots: dict[str, frozenset[int]]
    continuations: dict[str, Any]
    """How verification continues runs: ``{"continue_from": fn}`` or ``{"env": ..., "policy": ...}``."""
    gain: Callable[[str, int, int], float] | None = None
    notes: dict[str, float] = field(default_factory=dict)
    decision: Mapping[str, Sequence[float]] | None = None
    """Exact ``Q_h(s_t, a_t) - V_h(s_t)`` of every turn of every run (tabular only): what the choice at
    turn ``t`` added to the success probability over the policy's average choice there."""

    def decision_value(self, trajectory_id: str, start: int, end: int) -> float | None:
        """The sum of the decision values of turns ``start..end`` (``None`` without exact values)."""
        if self.decision is None:
            return None
        return float(sum(self.decision[trajectory_id][start : end + 1]))

    def no_effect(self, trajectory_id: str, start: int, end: int) -> int | None:
        """How many of turns ``start..end`` had no effect: ``|Q - V| < NO_EFFECT`` (``None`` without values)."""
        if self.decision is None:
            return None
        return sum(abs(d) < NO_EFFECT for d in self.decision[trajectory_id][start : end + 1])


# -- tabular environments ------------------------------------------------------------------------


@dataclass(frozen=True)
class TabularEnv:
    """A :class:`FiniteMDP` and the logits of the policy that plays it; ``nonce`` is the share of turns
    whose observation gets a random reference appended (a partial nonce: the state is still named)."""

    name: str
    kind: str
    make: Callable[[], Any]
    policy: Callable[[Compiled], FloatArray]
    nonce: float = 0.0


def corridor_policy(weights: Mapping[str, float] | None = None) -> Callable[[Compiled], FloatArray]:
    """``pi(a | o) ∝ weights[a]`` (defaults: :data:`BASE_WEIGHTS`)."""
    merged = {**BASE_WEIGHTS, **(weights or {})}
    return lambda c: logits_from_weights(c, merged)


CORRIDORS: tuple[TabularEnv, ...] = (
    TabularEnv(
        "hidden pivot",
        "corridor",
        lambda: Corridor("hidden", sections=12, items=(4,), forks=(2, 8), hidden=True, horizon=40),
        corridor_policy(),
    ),
    TabularEnv(
        "two pivots, both needed",
        "corridor",
        lambda: Corridor("conjunctive", sections=14, items=(3, 9), forks=(6,), horizon=40),
        corridor_policy(),
    ),
    TabularEnv(
        "luck-dominated slips",
        "corridor",
        lambda: Corridor("slips", sections=10, items=(3,), forks=(6,), slip=0.5, horizon=26),
        corridor_policy({"take the brass key": 6.0}),
    ),
    TabularEnv(
        "traps",
        "corridor",
        lambda: Corridor("traps", sections=12, fords=(3, 8), forks=(5,), ford_risk=1.0, horizon=40),
        corridor_policy(),
    ),
    TabularEnv(
        "failed runs take the pivot",
        "corridor",
        lambda: Corridor("pivot-shared", sections=12, items=(2,), fords=(7,), ford_risk=0.8, horizon=40),
        corridor_policy({"take the brass key": 8.0, "wade the ford": 4.0}),
    ),
)


@dataclass(frozen=True)
class TableMDP:
    """A gymnasium toy-text environment as a :class:`FiniteMDP`, from its transition table ``P``.

    ``P[s][a]`` lists ``(probability, next state, reward, terminated)``; a terminated transition wins
    when ``win(reward)``. The observation is the state number (toy-text observations are the state).
    """

    name: str
    table: Mapping[int, Mapping[int, Sequence[tuple[float, int, float, bool]]]]
    start: int
    horizon: int
    n_actions: int
    win: Callable[[float], bool]

    def initial(self, spec: Mapping[str, Any]) -> Hashable:
        return self.start

    def observe(self, state: Hashable) -> str:
        return f"state {state}"

    def actions(self, state: Hashable) -> tuple[str, ...]:
        return tuple(str(a) for a in range(self.n_actions))

    def transitions(self, state: Hashable, action: str) -> Sequence[Transition]:
        out: list[Transition] = []
        for p, nxt, reward, done in self.table[int(state)][int(action)]:  # type: ignore[call-overload]
            if p > 0:
                out.append((float(p), int(nxt), bool(done), bool(done) and self.win(float(reward))))
        return out


def gym_table(env_id: str, horizon: int, win: Callable[[float], bool], **kwargs: Any) -> TableMDP:
    """``gym.make(env_id, **kwargs)``'s table ``P`` and its start state after ``reset(seed=0)``."""
    import gymnasium

    env = gymnasium.make(env_id, **kwargs)
    try:
        start, _ = env.reset(seed=0)
        u: Any = env.unwrapped
        return TableMDP(env_id, u.P, int(start), horizon, int(u.action_space.n), win)
    finally:
        env.close()


def optimal_q(c: Compiled) -> FloatArray:
    """``Q*(o, a)`` per parameter: the optimal success probability within the whole horizon (value iteration)."""
    v = np.zeros(len(c.states))
    q = np.zeros(c.n_params)
    for _ in range(c.horizon):
        q = np.zeros(c.n_params)
        np.add.at(q, c.e_param, c.e_prob * np.where(c.e_done, c.e_win.astype(float), v[c.e_dst]))
        best = np.maximum.reduceat(q, c.offset[:-1])
        v = best[c.obs_of]
    return q


def epsilon_greedy(epsilon: float) -> Callable[[Compiled], FloatArray]:
    """``pi = (1 - epsilon) * greedy(Q*) + epsilon * uniform``, ``Q*`` the optimal success probability
    within the horizon (ties share the greedy mass)."""

    def logits(c: Compiled) -> FloatArray:
        q = optimal_q(c)
        block = np.repeat(np.arange(len(c.observations)), np.diff(c.offset))
        greedy = (q >= np.maximum.reduceat(q, c.offset[:-1])[block] - 1e-12).astype(float)
        greedy /= np.add.reduceat(greedy, c.offset[:-1])[block]
        uniform = 1.0 / np.diff(c.offset)[block]
        out: FloatArray = np.log((1.0 - epsilon) * greedy + epsilon * uniform)
        return out

    return logits


def boltzmann(temperature: float) -> Callable[[Compiled], FloatArray]:
    """``pi(a | o) proportional to exp(Q*(o, a) / temperature)``: a policy that prefers better actions in
    proportion to how much better they are (``Q*`` as in :func:`epsilon_greedy`)."""

    def logits(c: Compiled) -> FloatArray:
        q = optimal_q(c) / temperature
        block = np.repeat(np.arange(len(c.observations)), np.diff(c.offset))
        z = q - np.maximum.reduceat(q, c.offset[:-1])[block]
        out: FloatArray = z - np.log(np.add.reduceat(np.exp(z), c.offset[:-1]))[block]
        return out

    return logits


def wins_if_positive(reward: float) -> bool:
    """A terminal reward above 0 wins (FrozenLake, Taxi)."""
    return reward > 0


def always_wins(reward: float) -> bool:
    """Every terminal transition wins (CliffWalking: reaching the goal ends the episode)."""
    return True


TOY_TEXT: tuple[TabularEnv, ...] = (
    TabularEnv(
        "FrozenLake slippery",
        "gymnasium",
        lambda: gym_table("FrozenLake-v1", 40, wins_if_positive, is_slippery=True),
        epsilon_greedy(0.1),
    ),
    TabularEnv(
        "Taxi rainy",
        "gymnasium",
        lambda: gym_table("Taxi-v4", 40, wins_if_positive, is_rainy=True),
        epsilon_greedy(0.35),
    ),
    TabularEnv(
        "CliffWalking slippery",
        "gymnasium",
        lambda: gym_table("CliffWalking-v1", 60, always_wins, is_slippery=True),
        epsilon_greedy(0.2),
    ),
)


LUCK: tuple[TabularEnv, ...] = (
    TabularEnv(
        "rockfalls after the key",
        "luck",
        lambda: PitCorridor("pits-after", sections=12, items=(3,), forks=(5,), pits=(6, 9), pit_risk=0.5, horizon=40),
        corridor_policy(),
    ),
    TabularEnv(
        "rockfalls around a hidden pivot",
        "luck",
        lambda: PitCorridor(
            "pits-hidden", sections=12, items=(5,), forks=(8,), pits=(2, 7), pit_risk=0.6, hidden=True, horizon=40
        ),
        corridor_policy(),
    ),
    TabularEnv(
        "rockfalls and a ford",
        "luck",
        lambda: PitCorridor(
            "pits-ford", sections=12, items=(2,), fords=(6,), pits=(4, 9), pit_risk=0.4, ford_risk=0.5, horizon=40
        ),
        corridor_policy({"take the brass key": 3.0}),
    ),
)
"""Luck-decided corridors (:mod:`prover_bench.luck`): a rockfall ends a run whatever it chooses."""

NONCE: tuple[TabularEnv, ...] = (
    TabularEnv(
        "hidden pivot, nonce on half the observations",
        "nonce",
        lambda: Corridor("hidden-n", sections=12, items=(4,), forks=(2, 8), hidden=True, horizon=40),
        corridor_policy(),
        nonce=0.5,
    ),
    TabularEnv(
        "two pivots, nonce on half the observations",
        "nonce",
        lambda: Corridor("conjunctive-n", sections=14, items=(3, 9), forks=(6,), horizon=40),
        corridor_policy(),
        nonce=0.5,
    ),
)
"""Partial nonces: half the observations carry a random reference, so they never repeat whole."""

HELD_OUT: tuple[TabularEnv, ...] = (
    TabularEnv(
        "held-out: late hidden pivot",
        "corridor",
        lambda: Corridor("h-hidden", sections=14, items=(9,), forks=(3, 11), hidden=True, horizon=44),
        corridor_policy(),
    ),
    TabularEnv(
        "held-out: two pivots far apart",
        "corridor",
        lambda: Corridor("h-two", sections=15, items=(2, 11), forks=(5, 8), horizon=44),
        corridor_policy(),
    ),
    TabularEnv(
        "held-out: key then ford",
        "corridor",
        lambda: Corridor("h-keyford", sections=12, items=(4,), fords=(8,), forks=(2,), ford_risk=0.5, horizon=40),
        corridor_policy(),
    ),
    TabularEnv(
        "held-out: rockfalls before the key",
        "luck",
        lambda: PitCorridor("h-pits", sections=13, items=(7,), forks=(4,), pits=(2, 5), pit_risk=0.5, horizon=42),
        corridor_policy(),
    ),
    TabularEnv(
        "held-out: rockfalls, slips and two keys",
        "luck",
        lambda: PitCorridor(
            "h-pits2", sections=14, items=(3, 8), forks=(11,), pits=(5, 10), pit_risk=0.4, slip=0.4, horizon=40
        ),
        corridor_policy(),
    ),
    TabularEnv(
        "held-out: nonce on a third, key and ford",
        "nonce",
        lambda: Corridor("h-nonce", sections=12, items=(3,), fords=(7,), forks=(5,), ford_risk=0.6, horizon=40),
        corridor_policy(),
        nonce=0.33,
    ),
    TabularEnv(
        "held-out: FrozenLake 8x8 slippery",
        "gymnasium",
        lambda: gym_table("FrozenLake-v1", 100, wins_if_positive, is_slippery=True, map_name="8x8"),
        epsilon_greedy(0.15),
    ),
    TabularEnv(
        "held-out: CliffWalking slippery, more exploration",
        "gymnasium",
        lambda: gym_table("CliffWalking-v1", 50, always_wins, is_slippery=True),
        epsilon_greedy(0.3),
    ),
    TabularEnv(
        "held-out: Taxi rainy, less exploration",
        "gymnasium",
        lambda: gym_table("Taxi-v4", 30, wins_if_positive, is_rainy=True),
        epsilon_greedy(0.25),
    ),
)
"""Designs (and, with ``--held-out``, seeds) not used while the judges were developed."""


def decision_gap(batch: Batch) -> FloatArray:
    """``Q_h(s_t, a_t) - min_b Q_h(s_t, b)`` on every taken turn (0 elsewhere), ``h = H - t`` turns left:
    how much success probability the decision avoided losing."""
    c, ep, values = batch.c, batch.episodes, batch.values
    out = np.zeros(ep.states.shape, dtype=np.float64)
    for i in range(batch.n):
        for t in range(int(ep.length[i])):
            s, h = int(ep.states[i, t]), c.horizon - t
            q = []
            for a in range(int(c.n_actions[s])):
                rows = slice(int(c.out_start[s, a]), int(c.out_start[s, a] + c.out_count[s, a]))
                nxt = np.where(c.e_done[rows], c.e_win[rows].astype(float), values[h - 1, c.e_dst[rows]])
                q.append(float(np.dot(c.e_prob[rows], nxt)))
            out[i, t] = q[int(ep.actions[i, t])] - min(q)
    return out


def decision_values(batch: Batch) -> FloatArray:
    """``Q_h(s_t, a_t) - V_h(s_t)`` on every taken turn (0 elsewhere), ``h = H - t`` turns left: what the
    choice added to the success probability over the policy's average choice at that state. Summed over
    an episode with the luck terms ``V(s_{t+1}) - Q(s_t, a_t)`` it gives ``R - V(s_0)``."""
    c, ep, values = batch.c, batch.episodes, batch.values
    out = np.zeros(ep.states.shape, dtype=np.float64)
    for i in range(batch.n):
        for t in range(int(ep.length[i])):
            s, a, h = int(ep.states[i, t]), int(ep.actions[i, t]), c.horizon - t
            rows = slice(int(c.out_start[s, a]), int(c.out_start[s, a] + c.out_count[s, a]))
            nxt = np.where(c.e_done[rows], c.e_win[rows].astype(float), values[h - 1, c.e_dst[rows]])
            out[i, t] = float(np.dot(c.e_prob[rows], nxt)) - float(values[h, s])
    return out


def _annotate(batch: Batch, nonce: float, rng: np.random.Generator, logprobs: bool = False) -> list[Trajectory]:
    """The batch's trajectories with ``info["stochastic"]`` (the transition had several possible outcomes)
    on every turn, and a random ``[ref xxxxxxxx]`` appended to a ``nonce`` share of the observations; with
    ``logprobs``, also ``info["logprob"]``: ``log pi(a_t | o_t)`` under the batch's policy."""
    c, ep = batch.c, batch.episodes
    pi = action_probs(c, batch.theta) if logprobs else None
    out = []
    for i, run in enumerate(batch.trajectories()):
        turns = []
        for t, turn in enumerate(run.turns):
            s, a = int(ep.states[i, t]), int(ep.actions[i, t])
            obs = turn.observation
            if nonce > 0 and rng.random() < nonce:
                obs = f"{obs} [ref {int(rng.integers(1 << 32)):08x}]"
            info: dict[str, Any] = {"stochastic": bool(c.out_count[s, a] > 1)}
            if pi is not None:
                info["logprob"] = float(np.log(pi[c.offset[c.obs_of[s]] + a]))
            turns.append(turn.model_copy(update={"observation": obs, "info": info}))
        out.append(run.model_copy(update={"turns": tuple(turns)}))
    return out


def tabular_case(env: TabularEnv, groups: int, group_size: int, seed: int, logprobs: bool = False) -> Case:
    """``groups`` groups of the policy on ``env``, with pivots, exact gains and tabular continuations (with
    ``logprobs``, each turn's ``info["logprob"]``: the policy's log-probability of its action)."""
    mdp = env.make()
    c = compile_mdp(mdp)
    theta = env.policy(c)
    rng = np.random.default_rng([seed, zlib.crc32(env.name.encode())])
    batch = sample_batch(c, theta, groups, group_size, rng)
    pivots_known = hasattr(mdp, "is_pivotal")
    pivotal = batch.pivotal if pivots_known else batch.mask & (decision_gap(batch) >= PIVOT_GAP)
    index = {batch.trajectory_id(i): i for i in range(batch.n)}
    v = batch.value_along()

    def gain(trajectory_id: str, start: int, end: int) -> float:
        i = index[trajectory_id]
        return float(v[i, end + 1] - v[i, start])

    pivots = {batch.trajectory_id(i): frozenset(np.flatnonzero(pivotal[i]).tolist()) for i in range(batch.n)}
    start_value = float(value_table(c, theta)[c.horizon, c.initial])
    dv = decision_values(batch)
    decision = {batch.trajectory_id(i): dv[i, : int(batch.episodes.length[i])].tolist() for i in range(batch.n)}
    return Case(
        env.name,
        env.kind,
        _annotate(batch, env.nonce, np.random.default_rng([seed, 7, zlib.crc32(env.name.encode())]), logprobs),
        pivots,
        {"continue_from": tabular_hook(batch, Sampler(c, theta))},
        gain,
        {"success": start_value},
        decision,
    )


# -- TextWorld ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextWorldKind:
    """A kind of ``tw-cooking`` game (:class:`~prover_envs.textworld.CookingGame` settings)."""

    name: str
    settings: Mapping[str, Any]
    game_seed: int
    epsilon: float = 0.7
    max_steps: int = 30


TEXTWORLD_HELD_OUT: tuple[TextWorldKind, ...] = (
    TextWorldKind("held-out: TextWorld cut", {"recipe": 1, "take": 1, "cook": False, "cut": True}, 31, 0.85),
    TextWorldKind(
        "held-out: TextWorld cook, rooms", {"recipe": 1, "take": 1, "go": 6, "cook": True, "cut": False}, 32, 0.95
    ),
)
"""TextWorld games (game seeds) not used while the judges were developed. Their exploration (epsilon) was
set from the policy's success rate alone, with no judge run (cut: 0.58 at epsilon 0.7, 0.17 at 0.9; rooms:
0.83 at 0.7, 0.42 at 0.9; at the first setting, 0.7 and 0.8, no group was eligible)."""

TEXTWORLD: tuple[TextWorldKind, ...] = (
    TextWorldKind("TextWorld cut", {"recipe": 2, "take": 1, "cook": False, "cut": True}, 11),
    TextWorldKind("TextWorld cook", {"recipe": 2, "take": 1, "cook": True, "cut": False}, 12),
    TextWorldKind("TextWorld cut+cook", {"recipe": 1, "take": 1, "cook": True, "cut": True}, 13),
    TextWorldKind("TextWorld rooms", {"recipe": 1, "take": 1, "go": 6, "cook": True, "cut": False}, 14, 0.85),
)


def textworld_case(kind: TextWorldKind, groups: int, group_size: int, seed: int, cache_dir: str | None = None) -> Case:
    """Groups of the walkthrough follower (``explore="related"``) on one game; pivots are scoring commands."""
    from prover_envs import rollout
    from prover_envs.textworld import TextWorldEnv, WalkthroughFollower, make_cooking_game, snapshot_env

    game = make_cooking_game(kind.game_seed, cache_dir=cache_dir, **dict(kind.settings))
    policy = WalkthroughFollower(kind.epsilon, explore="related")
    spec = {"game_file": game.path, "max_steps": kind.max_steps}
    env = TextWorldEnv(max_steps=kind.max_steps, cache_dir=cache_dir)
    runs = [
        rollout(
            env,
            spec,
            policy,
            trajectory_id=f"g{g:03d}-{i:02d}",
            group_id=f"g{g:03d}",
            seed=seed * 1_000_003 + kind.game_seed * 10_007 + g * group_size + i,
            keep_info=("score",),
        )
        for g in range(groups)
        for i in range(group_size)
    ]
    env.close()
    pivots = {
        r.id: frozenset(t for t in range(r.num_turns - 1) if r.turns[t + 1].info["score"] > r.turns[t].info["score"])
        for r in runs
    }
    restore = snapshot_env(max_steps=kind.max_steps, cache_dir=cache_dir)
    return Case(kind.name, "textworld", runs, pivots, {"env": restore, "policy": policy})
