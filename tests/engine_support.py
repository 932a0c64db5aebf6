"""A tiny restorable environment with a token rendering, for EnginePolicy tests and the engine benchmark.

``KeyEnv``: turns ``0..horizon-1``; the key can be taken only at turn ``key_turn``; the episode succeeds
iff the key is held at the end. Observations are ``(turn, has_key)`` and render to one token,
``100 + 10 * turn + has_key``; the actions ``wait`` and ``take`` are the tokens 50 and 51. A recorded
row is ``prompt = SYSTEM + render(obs_0)`` and ``completion = a_0 + render(obs_1) + a_1 + ...``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prover_core import (
    BonusResult,
    Proposal,
    ProverConfig,
    ReplayEnv,
    Segment,
    SegmentRules,
    Step,
    Trajectory,
    Turn,
    compute_bonus,
)
from prover_engine import Generation, TokenStore

SYSTEM = (1, 2, 3)
ACTION_IDS = {"wait": (50,), "take": (51,)}


class KeyEnv:
    def __init__(self, horizon: int = 4, key_turn: int = 1) -> None:
        self.horizon, self.key_turn = horizon, key_turn
        self.t, self.key = 0, False

    def reset(self, spec: Mapping[str, Any]) -> Step:
        self.t, self.key = 0, False
        return Step((0, False))

    def step(self, action: Any) -> Step:
        if action not in ACTION_IDS:
            raise ValueError(f"unknown action {action!r}")
        if action == "take" and self.t == self.key_turn:
            self.key = True
        self.t += 1
        done = self.t >= self.horizon
        return Step((self.t, self.key), done=done, success=done and self.key)


def render(observation: Any) -> list[int]:
    turn, key = observation
    return [100 + 10 * int(turn) + int(key)]


def parse(generation: Generation) -> str:
    """``take`` iff the first generated id is 51."""
    return "take" if generation.token_ids[0] == ACTION_IDS["take"][0] else "wait"


def seed_model(prompt: list[int], body: dict[str, Any]) -> list[int]:
    """``take`` (51) when the request's seed is odd, else ``wait`` (50)."""
    return [50 + int(body["seed"]) % 2]


def record(
    tid: str, gid: str, actions: Sequence[str], env: KeyEnv | None = None
) -> tuple[Trajectory, list[int], list[int]]:
    """Play ``actions`` in ``env`` and return the trajectory with its token spans and its row's ids."""
    env = env or KeyEnv(horizon=len(actions))
    step = env.reset({})
    prompt = [*SYSTEM, *render(step.observation)]
    completion: list[int] = []
    turns = []
    for action in actions:
        start = len(completion)
        completion += ACTION_IDS[action]
        turns.append(Turn(observation=step.observation, action=action, token_span=(start, len(completion))))
        step = env.step(action)
        if not step.done:
            completion += render(step.observation)
    assert step.done, "the actions must play a whole episode"
    return Trajectory(id=tid, group_id=gid, turns=turns, success=step.success), prompt, completion


def key_group(
    gid: str, successes: int = 2, size: int = 8, horizon: int = 4
) -> list[tuple[Trajectory, list[int], list[int]]]:
    """``successes`` runs that take the key at turn 1, the rest never take it."""
    win = ["wait", "take"] + ["wait"] * (horizon - 2)
    lose = ["wait"] * horizon
    return [record(f"{gid}-{i}", gid, win if i < successes else lose) for i in range(size)]


def store_of(rows: Sequence[tuple[Trajectory, list[int], list[int]]]) -> TokenStore:
    store = TokenStore()
    for trajectory, prompt, completion in rows:
        store.add(trajectory, prompt, completion)
    return store


class FixedJudge:
    """Proposes turns ``start..end`` of the successful run."""

    def __init__(self, start: int = 1, end: int = 1) -> None:
        self.start, self.end = start, end

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal:
        return Proposal(segment=Segment(trajectory_id=success.id, start=self.start, end=self.end))


def verify_key_group(
    rows: Sequence[tuple[Trajectory, list[int], list[int]]],
    policy: Any,
    config: ProverConfig | None = None,
) -> BonusResult:
    """``compute_bonus`` over a :func:`key_group`'s trajectories: ``FixedJudge(1, 1)``, replayed
    ``KeyEnv(horizon=4)`` states, ``policy`` continuing them, ``ProverConfig(k=4)`` by default."""
    return compute_bonus(
        [t for t, _, _ in rows],
        judge=FixedJudge(1, 1),
        env=ReplayEnv(lambda: KeyEnv(horizon=4)),
        policy=policy,
        config=config if config is not None else ProverConfig(k=4),
    )
