"""Finite text MDPs with a time limit, whose success probabilities are computed exactly.

For a stationary policy ``pi`` and a horizon of ``H`` turns, the probability of success from state
``s`` with ``h`` turns left is

    V(s, 0) = 0
    V(s, h) = sum_a pi(a | o(s)) sum_{(p, s', done, win)} p * (win if done else V(s', h - 1))

so ``Delta`` estimates can be checked against ``V(s_post) - V(s_pre)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from functools import cache
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from prover_core.protocols import PolicyContext, Step

Transition = tuple[float, Hashable, bool, bool]
"""``(probability, next_state, done, success)``."""


class FiniteMDP(Protocol):
    """A finite MDP over hashable states with text observations and a turn limit."""

    @property
    def horizon(self) -> int: ...

    def initial(self, spec: Mapping[str, Any]) -> Hashable: ...

    def observe(self, state: Hashable) -> str: ...

    def actions(self, state: Hashable) -> tuple[str, ...]: ...

    def transitions(self, state: Hashable, action: str) -> Sequence[Transition]: ...


class MDPEnv:
    """An :class:`~prover_core.restore.Env` that samples a :class:`FiniteMDP`.

    ``reset(spec)`` seeds the generator from ``spec["seed"]``; each step draws one uniform number, so
    a reset with the same seed followed by the same actions replays exactly. Running out of turns
    ends the episode as a failure.
    """

    def __init__(self, mdp: FiniteMDP) -> None:
        self.mdp = mdp
        self.state: Hashable = None
        self.turn = 0
        self.rng = np.random.default_rng(0)

    def _step(self, done: bool = False, success: bool = False) -> Step:
        actions = () if done else self.mdp.actions(self.state)
        return Step(self.mdp.observe(self.state), done, success, {"actions": actions})

    def reset(self, spec: Mapping[str, Any]) -> Step:
        self.state = self.mdp.initial(spec)
        self.turn = 0
        self.rng = np.random.default_rng(int(spec.get("seed", 0)))
        return self._step()

    def reseed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def step(self, action: str) -> Step:
        if action not in self.mdp.actions(self.state):
            raise ValueError(f"action {action!r} is not admissible here: {self.mdp.actions(self.state)}")
        u = self.rng.random()
        outcomes = self.mdp.transitions(self.state, action)
        cumulative = np.cumsum([p for p, *_ in outcomes])
        _, nxt, done, success = outcomes[min(int(np.searchsorted(cumulative, u, side="right")), len(outcomes) - 1)]
        self.state, self.turn = nxt, self.turn + 1
        if not done and self.turn >= self.mdp.horizon:
            return self._step(done=True, success=False)
        return self._step(done, success)


class TabularPolicy:
    """A softmax policy over admissible actions: ``pi(a | o) = exp(logit(o, a)) / sum_b exp(logit(o, b))``."""

    def __init__(self, logit: Callable[[str, str], float]) -> None:
        self.logit = logit

    def probs(self, observation: str, actions: Sequence[str]) -> NDArray[np.float64]:
        z = np.array([self.logit(observation, a) for a in actions], dtype=np.float64)
        z = np.exp(z - z.max())
        p: NDArray[np.float64] = z / z.sum()
        return p

    def act(self, context: PolicyContext) -> str:
        actions = tuple(context.info["actions"])
        action: str = actions[int(context.rng.choice(len(actions), p=self.probs(context.observation, actions)))]
        return action


def exact_success_probability(mdp: FiniteMDP, policy: TabularPolicy) -> Callable[[Hashable, int], float]:
    """``V(state, turns_left)``: the exact success probability of ``policy`` (memoised recursion)."""

    @cache
    def value(state: Hashable, turns_left: int) -> float:
        if turns_left <= 0:
            return 0.0
        actions = mdp.actions(state)
        total = 0.0
        for pa, action in zip(policy.probs(mdp.observe(state), actions).tolist(), actions, strict=True):
            for p, nxt, done, success in mdp.transitions(state, action):
                total += pa * p * (float(success) if done else value(nxt, turns_left - 1))
        return total

    return value


def log_weights(weights: Mapping[str, float]) -> Callable[[str, str], float]:
    """Logits ``log w[a]`` by action name, for :class:`TabularPolicy` (``pi(a) ∝ w[a]``)."""
    return lambda _observation, action: math.log(weights[action])
