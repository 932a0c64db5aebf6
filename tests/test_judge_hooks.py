"""A judge's optional hooks are declared protocols, checked with ``isinstance``: ``others``, ``new_step``, ``stats``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from prover_core import (
    AnchorJudge,
    ChoiceJudge,
    Decline,
    DivergenceJudge,
    FirstOf,
    OthersJudge,
    PerStepJudge,
    Proposal,
    RandomJudge,
    ReportingJudge,
    SegmentRules,
    Trajectory,
)
from prover_core.judges.llm import LLMJudge
from prover_core.propose import propose
from tests.conftest import make_trajectory


class Plain:
    """The three-argument protocol; its second parameter happens to be called ``others`` (positional)."""

    def propose(self, success: Trajectory, others: Sequence[Trajectory], rules: SegmentRules) -> Decline:
        return Decline(reason="plain")


class Seeing:
    """Takes ``others`` keyword-only and records what it was given."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def propose(
        self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules, *, others: Sequence[Trajectory]
    ) -> Decline:
        self.seen = [t.id for t in others]
        return Decline(reason="seeing")


class Registered:
    """Takes ``others`` through ``**kwargs``: declared by registration instead of by its signature."""

    def __init__(self) -> None:
        self.kwargs: dict[str, object] = {}

    def propose(
        self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules, **kw: object
    ) -> Decline:
        self.kwargs = kw
        return Decline(reason="registered")


OthersJudge.register(Registered)


class Stepped:
    def __init__(self) -> None:
        self.steps = 0

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Decline:
        return Decline(reason="stepped")

    def new_step(self) -> None:
        self.steps += 1

    def stats(self) -> Mapping[str, float]:
        return {"steps": float(self.steps)}


def test_the_library_judges_declare_their_hooks() -> None:
    llm = LLMJudge.from_url("http://127.0.0.1:9/v1", "m")
    assert [isinstance(j, OthersJudge) for j in (ChoiceJudge(), FirstOf(Plain()), llm)] == [True, True, True]
    assert not any(isinstance(j, OthersJudge) for j in (AnchorJudge(), DivergenceJudge(), RandomJudge(), Plain()))
    assert isinstance(llm, PerStepJudge) and isinstance(llm, ReportingJudge)
    assert isinstance(FirstOf(Plain()), PerStepJudge) and not isinstance(ChoiceJudge(), PerStepJudge | ReportingJudge)


def test_others_reach_exactly_the_judges_that_declare_them() -> None:
    success = make_trajectory("s", "g", True, list("abc"))
    fail, other = make_trajectory("f", "g", False, list("abd")), make_trajectory("o", "g", True, list("abc"))
    seeing, registered = Seeing(), Registered()
    for judge in (Plain(), seeing, registered):
        answer = asyncio.run(propose(judge, success, [fail], SegmentRules(), [other]))
        assert isinstance(answer, Decline | Proposal)
    assert seeing.seen == ["o"] and registered.kwargs == {"others": [other]}


def test_first_of_forwards_new_step_to_the_judges_with_per_step_state() -> None:
    stepped = Stepped()
    assert isinstance(stepped, PerStepJudge) and isinstance(stepped, ReportingJudge)
    combined = FirstOf(Plain(), stepped)
    combined.new_step()
    combined.new_step()
    assert stepped.steps == 2 and stepped.stats() == {"steps": 2.0}
