"""Judges by name: one registration puts a judge in ``prover demo --judge``, ``prover bench judges`` and
docs/api.md."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence

import pytest

from prover_bench.judge_eval import JudgeBenchSettings, offline_judges, run_judge_bench
from prover_core.cli import build_parser
from prover_core.data import Decline, Proposal, Segment, SegmentRules, Trajectory
from prover_core.demo.run import run_demo
from prover_core.judges import (
    AnchorJudge,
    ChoiceJudge,
    DivergenceJudge,
    RandomJudge,
    judge_names,
    make_judge,
    register_judge,
    registry,
)
from tests.api_doc import render


class FirstTurnJudge:
    """Nominates turn 0 of every successful run (a judge for this test)."""

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        return rules.no_segment(success) or Proposal(segment=Segment(trajectory_id=success.id, start=0, end=0))


@pytest.fixture
def first_turn(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``first turn`` registered, in one place, for the length of one test."""
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))
    register_judge("first turn", lambda seed: FirstTurnJudge())
    yield "first turn"


def demo_judge_choices() -> Sequence[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    judge = next(a for a in sub.choices["demo"]._actions if a.dest == "judge")
    assert judge.choices is not None
    return list(judge.choices)


def test_the_library_registers_its_four_judges_in_order() -> None:
    assert judge_names() == ("choice", "anchor", "divergence", "random")
    kinds = [type(make_judge(name)) for name in judge_names()]
    assert kinds == [ChoiceJudge, AnchorJudge, DivergenceJudge, RandomJudge]
    random = make_judge("random", seed=7)
    assert isinstance(random, RandomJudge) and random.seed == 7
    assert demo_judge_choices() == list(judge_names())


def test_an_unknown_name_and_a_name_taken_twice_are_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown judge 'oracle'; choose from \['anchor', 'choice'"):
        make_judge("oracle")
    with pytest.raises(ValueError, match="'choice' is already registered"):
        register_judge("choice", lambda seed: ChoiceJudge())


def test_a_judge_registered_once_appears_in_the_demo_the_bench_and_the_api_page(first_turn: str) -> None:
    assert first_turn in demo_judge_choices()
    run = run_demo(groups=4, group_size=8, judge=first_turn)
    proposed = [g.proposal for g in run.result.report.groups if g.proposal is not None]
    assert proposed and all(p.segment.start == p.segment.end == 0 for p in proposed)
    assert isinstance(offline_judges(0)[first_turn], FirstTurnJudge)
    bench = run_judge_bench(JudgeBenchSettings(groups=4, batches=1, textworld=False, only=("hidden pivot",)))
    assert list(bench.results["hidden pivot"])[:5] == [*judge_names()]
    assert f"{first_turn}: loc (same-length chance)" in bench.markdown()
    assert f"| `{first_turn}` | `{__name__}.FirstTurnJudge` | Nominates turn 0" in render()
