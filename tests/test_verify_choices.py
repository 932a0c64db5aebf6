"""``delta_of="choices"``: Delta of what the segment's choices added, not the luck of its recorded transitions.

A three-turn game with solvable values: at ``start`` the agent picks ``a`` or ``b`` (reaching ``good`` with
probability ``p_a`` or ``p_b``, else ``bad``); at ``good``/``bad`` it may only ``go`` (to ``g2`` with
probability 0.9 / 0.1, else ``b2``); at ``g2``/``b2`` it ``end``s (success iff at ``g2``). The policy picks
``a`` and ``b`` with probability 1/2 each. So ``V(g2) = 1``, ``V(good) = 0.9``, ``V(bad) = 0.1``,
``Q(start, x) = 0.1 + 0.8 p_x`` and ``V(start) = (Q(start, a) + Q(start, b)) / 2``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from prover_core import (
    DivergenceJudge,
    ProverConfig,
    ReplayEnv,
    Segment,
    Trajectory,
    Turn,
    compute_bonus,
)
from prover_core.continuations import env_continuer, hook_continuer, run_continuation
from prover_core.data import Outcome
from prover_core.errors import ProtocolError
from prover_core.pairing import paired
from prover_core.protocols import PolicyContext, Step, as_policy
from prover_core.verify import verify_segment_detailed
from tests.conftest import make_trajectory

GO = {"good": 0.9, "bad": 0.1}


class Gamble:
    """The game above; ``reseed`` draws every later transition from a fresh generator."""

    def __init__(self, p_a: float, p_b: float) -> None:
        self.p = {"a": p_a, "b": p_b}
        self.rng = np.random.default_rng(0)
        self.state = "start"

    def reset(self, spec: Mapping[str, Any]) -> Step:
        self.rng, self.state = np.random.default_rng(int(spec["seed"])), "start"
        return Step(self.state)

    def reseed(self, seed: int) -> None:
        self.rng = np.random.default_rng([seed, 12345])

    def step(self, action: str) -> Step:
        u = self.rng.random()
        if self.state == "start":
            self.state = "good" if u < self.p[action] else "bad"
        elif self.state in GO:
            self.state = "g2" if u < GO[self.state] else "b2"
        else:
            return Step("end", done=True, success=self.state == "g2")
        return Step(self.state)


def half_half(context: PolicyContext) -> str:
    if context.observation == "start":
        return "a" if context.rng.random() < 0.5 else "b"
    return "go" if context.observation in GO else "end"


def lucky_run(p_a: float, p_b: float) -> Trajectory:
    """A recorded success that chose ``a`` and was lucky twice (``start -> good -> g2``)."""
    for seed in range(1000):
        env = Gamble(p_a, p_b)
        observations = [env.reset({"seed": seed}).observation]
        for action in ("a", "go"):
            observations.append(env.step(action).observation)
        if observations == ["start", "good", "g2"] and env.step("end").success:
            turns = tuple(Turn(observation=o, action=a) for o, a in zip(observations, ("a", "go", "end"), strict=True))
            return Trajectory(id="lucky", group_id="g", reset={"seed": seed}, turns=turns, success=True)
    raise AssertionError("no lucky seed")


def q_start(p: float) -> float:
    return GO["bad"] + (GO["good"] - GO["bad"]) * p


def delta(run: Trajectory, segment: Segment, config: ProverConfig, p_a: float, p_b: float) -> float:
    continuer = env_continuer(ReplayEnv(lambda: Gamble(p_a, p_b)), as_policy(half_half), max_turns=10)
    verification, _ = asyncio.run(verify_segment_detailed(run, segment, continuer, config.stages.verify))
    return verification.delta


# (p_a, p_b): a choice worth +0.12; a choice worth nothing (pure luck); a bad choice that got lucky.
CASES = [(0.5, 0.2), (0.5, 0.5), (0.2, 0.5)]


@pytest.mark.parametrize(("p_a", "p_b"), CASES)
def test_one_turn_delta_is_the_choices_advantage_not_the_luck(p_a: float, p_b: float) -> None:
    run, k = lucky_run(p_a, p_b), 4000
    v_start = (q_start(p_a) + q_start(p_b)) / 2
    turn0 = Segment(trajectory_id=run.id, start=0, end=0)
    states = delta(run, turn0, ProverConfig(k=k), p_a, p_b)
    choices = delta(run, turn0, ProverConfig(k=k, delta_of="choices"), p_a, p_b)
    # 4000 paired continuations a side: the standard error of each Delta is below 0.011.
    assert states == pytest.approx(GO["good"] - v_start, abs=0.04)  # V(s_1) - V(s_0): choice and luck
    assert choices == pytest.approx(q_start(p_a) - v_start, abs=0.04)  # Q(s_0, a) - V(s_0): the choice only


def test_a_two_turn_segment_replays_while_on_the_recorded_path() -> None:
    """Turn 1 has no choice, so replaying ``[0, 1]`` is worth ``Q(start, a) - V(start)`` too; the state
    Delta of the same segment is ``V(g2) - V(start)``."""
    p_a, p_b = 0.5, 0.2
    run, k = lucky_run(p_a, p_b), 4000
    v_start = (q_start(p_a) + q_start(p_b)) / 2
    both = Segment(trajectory_id=run.id, start=0, end=1)
    assert delta(run, both, ProverConfig(k=k), p_a, p_b) == pytest.approx(1.0 - v_start, abs=0.04)
    assert delta(run, both, ProverConfig(k=k, delta_of="choices"), p_a, p_b) == pytest.approx(
        q_start(p_a) - v_start, abs=0.04
    )


class Spy:
    """``half_half`` that records where it was asked to act: (observation, boundary, replayed turns)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int | None, int]] = []

    def act(self, context: PolicyContext) -> str:
        self.asked.append((context.observation, context.boundary, context.replayed))
        return half_half(context)


@pytest.mark.parametrize("seed", range(40))
def test_the_policy_acts_from_the_first_observation_off_the_recorded_path(seed: int) -> None:
    run = lucky_run(0.5, 0.2)
    spy = Spy()
    outcome = asyncio.run(run_continuation(ReplayEnv(lambda: Gamble(0.5, 0.2)), spy, run, 0, seed, 10, replay=2))
    env = Gamble(0.5, 0.2)
    env.reset(run.reset)
    env.reseed(seed)
    first = env.step("a").observation  # the replayed choice's fresh transition
    if first == "good":  # on the path: turn 1 replayed too, the policy acts at turn 2 only
        assert spy.asked == [(env.step("go").observation, 2, 2)]
    else:  # off the path: the policy acts from turn 1 on (history[:1] recorded, 1 turn replayed)
        assert spy.asked == [("bad", 1, 1), (env.step("go").observation, 1, 1)]
    assert outcome.turns == len(spy.asked)  # replayed turns are not policy turns


def test_pre_continuations_never_replay_and_the_hook_gets_replay_on_post_only() -> None:
    calls: list[tuple[int, int]] = []

    def continue_from(trajectory: Trajectory, turn: int, seed: int, replay: int = 0) -> bool:
        calls.append((turn, replay))
        return True

    run = make_trajectory("t", "g", True, list("abcdef"))
    config = ProverConfig(k=3, delta_of="choices")
    asyncio.run(
        verify_segment_detailed(
            run, Segment(trajectory_id="t", start=1, end=2), hook_continuer(continue_from), config.stages.verify
        )
    )
    assert sorted(calls) == [(1, 0)] * 3 + [(1, 2)] * 3


def _group() -> list[Trajectory]:
    return [make_trajectory(f"t{i}", "g", i == 0, list("abcd")) for i in range(4)]


def test_a_hook_without_replay_is_refused_before_anything_runs() -> None:
    with pytest.raises(ProtocolError, match="replay"):
        compute_bonus(
            _group(),
            judge=DivergenceJudge(),
            continue_from=lambda t, turn, seed: True,
            config=ProverConfig(delta_of="choices"),
        )


def test_an_executor_without_replay_is_refused_under_choices() -> None:
    async def executor(trajectory: Trajectory, turn: int, seed: int) -> Outcome:
        return Outcome(success=True)

    with pytest.raises(ProtocolError, match="replay=0"):
        compute_bonus(_group(), judge=DivergenceJudge(), executor=executor, config=ProverConfig(delta_of="choices"))


def always_a(context: PolicyContext) -> str:
    return "a" if context.observation == "start" else "go" if context.observation in GO else "end"


@pytest.mark.parametrize("pairing", ["sequential", "turn"])
def test_a_choice_the_policy_makes_anyway_earns_nothing_for_its_luck(pairing: str) -> None:
    """The policy always picks ``a``: the recorded ``a`` adds nothing (``Q = V = 0.5``). Its lucky transition
    to ``good`` makes the state Delta ``V(good) - V(start) = 0.4``, credited; replayed with paired seeds, each
    post continuation meets the transitions its pre continuation met, so the choice Delta is exactly 0."""
    run = lucky_run(0.5, 0.2)
    turn0 = Segment(trajectory_id=run.id, start=0, end=0)

    def verify(delta_of: str) -> Any:
        config = ProverConfig(k=64, delta_of=delta_of, pairing=pairing)
        env, policy = paired(config.pairing, ReplayEnv(lambda: Gamble(0.5, 0.2)), as_policy(always_a))
        continuer = env_continuer(env, policy, max_turns=10)
        verification, _ = asyncio.run(verify_segment_detailed(run, turn0, continuer, config.stages.verify))
        return verification

    states, choices = verify("states"), verify("choices")
    assert states.accepted and states.delta == pytest.approx(0.4, abs=0.15)
    assert (choices.delta, choices.accepted) == (0.0, False)
