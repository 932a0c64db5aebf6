"""Both sides of the continuation turn limit: an env continuation may take exactly ``max_turns`` turns
(:func:`~prover_core.continuations.run_continuation`), one more is a
:class:`~prover_core.errors.ContinuationLimitError`; a ``continue_from`` hook under a turn budget may report exactly
``max_continuation_turns`` (what :class:`~prover_core.runner.Runner` reserved for it), one more is counted as failed
(``turn_limit``) with its excess named (:mod:`prover_core.budget`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from prover_core import DivergenceJudge, ProverConfig, compute_bonus
from prover_core.budget import TurnBudget
from prover_core.continuations import Continuer, env_continuer, failure_kind, hook_continuer
from prover_core.data import Outcome, Trajectory
from prover_core.demo import VaultMDP
from prover_core.demo.run import rollout_batch
from prover_core.errors import ContinuationLimitError
from prover_core.protocols import PolicyContext, Step
from prover_core.runner import Runner
from tests.conftest import make_trajectory

LIMIT = 3
TRAJECTORY = make_trajectory("a", "g", True, ["a", "b", "c"])


class Countdown:
    """An episode that ends (with success) after exactly ``length`` steps from the restored state."""

    def __init__(self, length: int) -> None:
        self.left = length
        self.last = Step(observation=length)

    def step(self, action: Any) -> Step:
        self.left -= 1
        self.last = Step(observation=self.left, done=self.left == 0, success=self.left == 0)
        return self.last


class CountdownEnv:
    def __init__(self, length: int) -> None:
        self.length = length

    def restore(self, trajectory: Trajectory, turn: int, seed: int) -> Countdown:
        return Countdown(self.length)


class Counting:
    """A policy that counts its calls."""

    def __init__(self) -> None:
        self.acts = 0

    def act(self, context: PolicyContext) -> str:
        self.acts += 1
        return "go"


async def continue_once(continuer: Continuer) -> Outcome:
    """One continuation of ``TRAJECTORY`` from its turn 0, seed 7."""
    return await continuer(TRAJECTORY, 0, 7)


@pytest.mark.parametrize("threaded", [False, True], ids=["on-the-loop", "in-a-thread"])
@pytest.mark.parametrize("length", [LIMIT - 1, LIMIT], ids=["one-under", "exactly-the-limit"])
def test_an_env_continuation_that_ends_at_or_under_its_turn_limit_succeeds(length: int, threaded: bool) -> None:
    """max_turns=3: an episode that ends at its 2nd or 3rd step is an outcome, its turns counted (2 or 3)."""
    policy = Counting()
    continuer = env_continuer(CountdownEnv(length), policy, max_turns=LIMIT, threaded=threaded)
    outcome = asyncio.run(continue_once(continuer))
    assert outcome == Outcome(success=True, turns=length)
    assert policy.acts == length


@pytest.mark.parametrize("threaded", [False, True], ids=["on-the-loop", "in-a-thread"])
def test_an_env_continuation_that_needs_one_turn_more_than_its_limit_is_a_limit_error(threaded: bool) -> None:
    """max_turns=3, an episode that would end at its 4th step: stopped after 3 policy turns, never a 4th."""
    policy = Counting()
    continuer = env_continuer(CountdownEnv(LIMIT + 1), policy, max_turns=LIMIT, threaded=threaded)
    with pytest.raises(ContinuationLimitError, match=r"^continuation did not end within 3 turns$") as caught:
        asyncio.run(continue_once(continuer))
    assert failure_kind(caught.value) == "turn_limit"
    assert policy.acts == LIMIT


# --- a hook's reported turns against the turn limit its budget reserved --------------------------------


def run_hook(reported: int, budget: TurnBudget) -> Any:
    """One continuation of a hook that reports ``reported`` policy turns, run by a :class:`Runner` with a turn
    budget and ``max_continuation_turns=6``: its outcome, or the exception it failed with."""
    hook = hook_continuer(lambda trajectory, turn, seed: Outcome(success=True, turns=reported))
    config = ProverConfig(max_continuation_turns=6)

    async def one() -> Any:
        runner = Runner(TRAJECTORY, hook, config.stages.verify, asyncio.Semaphore(1), budget=budget)
        assert runner.reserve == 6  # not metered: it reserves its whole turn limit before it starts
        return await runner.one(0, 11)

    return asyncio.run(one())


@pytest.mark.parametrize("reported", [5, 6], ids=["one-under", "exactly-the-limit"])
def test_a_hook_that_reports_at_most_its_turn_limit_is_an_outcome(reported: int) -> None:
    """Reserved 6 of 20, used 5 or 6: the outcome stands, and only the unused part (1 or 0) goes back."""
    budget = TurnBudget(20)
    assert run_hook(reported, budget) == Outcome(success=True, turns=reported)
    assert budget.used == reported and budget.left == 20 - reported


def test_a_hook_that_reports_one_turn_past_its_limit_is_a_failed_continuation_naming_its_excess() -> None:
    """Reserved 6, reported 7: a :class:`ContinuationLimitError` (``turn_limit``), returned as the continuation's
    result; the budget keeps the 6 it reserved (the cap holds), none given back."""
    budget = TurnBudget(20)
    result = run_hook(7, budget)
    assert isinstance(result, ContinuationLimitError) and failure_kind(result) == "turn_limit"
    assert str(result) == (
        "the continuation reported 7 policy turns, more than max_continuation_turns (6) that the turn budget "
        "reserved for it"
    )
    assert budget.used == 6


@pytest.mark.parametrize("reported, refused", [(5, False), (6, False), (7, True)])
def test_compute_bonus_counts_a_hook_past_its_turn_limit_as_failed_and_one_at_it_as_finished(
    reported: int, refused: bool
) -> None:
    """Under ``max_extra_share`` with ``max_continuation_turns=6``: a hook reporting 5 or 6 turns finishes (every
    finished continuation's turns counted: a multiple of what it reports), one reporting 7 fails every time."""
    batch = rollout_batch(VaultMDP(), groups=8, group_size=8, seed=0)
    r = compute_bonus(
        batch,
        judge=DivergenceJudge(),
        continue_from=lambda trajectory, turn, seed: Outcome(success=turn >= 3 and seed % 3 > 0, turns=reported),
        config=ProverConfig(max_extra_share=1.0, max_continuation_turns=6),
    )
    failed = sum(g.verify_stats.failures.get("turn_limit", 0) for g in r.report.groups if g.verify_stats)
    turns = r.report.metrics()["prover/policy_turns"]
    if refused:
        assert failed > 0 and turns == 0
    else:
        assert failed == 0 and turns > 0 and turns % reported == 0


@pytest.mark.parametrize(("reported", "refused"), [(6, False), (7, True)])
def test_without_a_turn_budget_a_hook_past_its_turn_limit_is_still_a_failed_continuation(
    reported: int, refused: bool
) -> None:
    """``max_continuation_turns`` holds for a hook's own count with no ``max_extra_share`` too: a continuation that
    reports 7 turns under a limit of 6 ran past it and is counted as ``turn_limit``, one that reports 6 finishes."""
    batch = rollout_batch(VaultMDP(), groups=8, group_size=8, seed=0)
    r = compute_bonus(
        batch,
        judge=DivergenceJudge(),
        continue_from=lambda trajectory, turn, seed: Outcome(success=turn >= 3 and seed % 3 > 0, turns=reported),
        config=ProverConfig(max_continuation_turns=6),
    )
    stats = [g.verify_stats for g in r.report.groups if g.verify_stats]
    failed = sum(s.failures.get("turn_limit", 0) for s in stats)
    assert stats
    decided = r.report.summary()["accepted"] + r.report.summary()["rejected"]
    if refused:
        assert failed > 0 and decided == 0
    else:
        assert failed == 0 and decided > 0
