"""The judge harness: its truth (pivot labels, chance level, exact gains) is exact on small cases."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from prover_core import Proposal, ProverConfig, Segment, SegmentRules, Trajectory
from prover_core.bench.batch import sample_batch
from prover_core.bench.judge_cases import (
    CORRIDORS,
    Case,
    TableMDP,
    TabularEnv,
    decision_gap,
    epsilon_greedy,
    gym_table,
    tabular_case,
)
from prover_core.bench.judge_eval import JudgeBenchSettings, chance, evaluate, hit, run_judge_bench
from prover_core.bench.suite import ITEMS
from prover_core.bench.tabular import compile_mdp, value_table
from prover_core.cli import main
from prover_core.data import Outcome
from tests.conftest import make_trajectory

# A one-turn gamble: action "0" wins for sure, "1" wins with probability 0.3, "2" loses; horizon 1.
GAMBLE = TableMDP(
    "gamble",
    {0: {0: [(1.0, 1, 1.0, True)], 1: [(0.3, 1, 1.0, True), (0.7, 2, 0.0, True)], 2: [(1.0, 2, 0.0, True)]}},
    start=0,
    horizon=1,
    n_actions=3,
    win=lambda reward: reward > 0,
)


def test_decision_gap_by_hand() -> None:
    # Q("0") = 1, Q("1") = 0.3, Q("2") = 0: the gaps to the worst action are 1, 0.3 and 0.
    c = compile_mdp(GAMBLE)
    theta = np.log(np.full(3, 1 / 3))
    batch = sample_batch(c, theta, 4, 8, np.random.default_rng(0))
    gaps = decision_gap(batch)[:, 0]
    expected = np.array([1.0, 0.3, 0.0])[batch.episodes.actions[:, 0]]
    assert np.allclose(gaps, expected)
    assert math.isclose(value_table(c, theta)[1, c.initial], (1 + 0.3) / 3)


def test_toy_text_pivots_are_the_decisions_that_avoid_losing_at_least_the_threshold() -> None:
    case = tabular_case(TabularEnv("gamble", "test", lambda: GAMBLE, lambda c: np.log(np.full(3, 1 / 3))), 4, 8, 0)
    for run in case.trajectories:
        assert case.pivots[run.id] == (frozenset({0}) if run.turns[0].action in ("0", "1") else frozenset())
        # the exact gain of the one-turn segment is the outcome minus V(s_0) = 1.3 / 3
        assert case.gain is not None and math.isclose(case.gain(run.id, 0, 0), run.success - 1.3 / 3)


def test_corridor_pivots_are_taking_the_item_where_it_lies() -> None:
    env = CORRIDORS[1]  # two visible items, both needed
    case = tabular_case(env, 4, 8, 0)
    for run in case.trajectories:
        truth = {
            t
            for t, turn in enumerate(run.turns)
            if turn.action.startswith("take the")
            and f"A {turn.action.removeprefix('take the ')} lies" in turn.observation
        }
        assert case.pivots[run.id] == truth
    assert any(case.pivots.values())
    assert all(
        any(f"take the {item}" == t.action for t in run.turns)
        for item in ITEMS[:2]
        for run in case.trajectories
        if run.success
    )


def test_gym_tables_keep_gymnasiums_transitions() -> None:
    pytest.importorskip("gymnasium")
    lake = gym_table("FrozenLake-v1", 10, lambda r: r > 0, is_slippery=True)
    # state 14 (next to the goal 15), action 2 (right): slips up, right or down with 1/3 each; right wins
    outcomes = lake.transitions(14, "2")
    assert sorted((round(p, 6), s, done, win) for p, s, done, win in outcomes) == [
        (0.333333, 10, False, False),
        (0.333333, 14, False, False),
        (0.333333, 15, True, True),
    ]
    assert lake.start == 0 and lake.actions(0) == ("0", "1", "2", "3")


def test_epsilon_greedy_puts_the_greedy_mass_on_the_best_action() -> None:
    c = compile_mdp(GAMBLE)
    probs = np.exp(epsilon_greedy(0.3)(c))
    assert np.allclose(probs, [0.7 + 0.1, 0.1, 0.1])


def _case(pivots: Sequence[int], wins: Sequence[bool]) -> Case:
    runs = [
        make_trajectory(f"r{i}", "g", win, ["a", "b", "c", "d"], ["o0", "o1", "o2", "o3"]) for i, win in enumerate(wins)
    ]
    return Case(
        "hand",
        "test",
        runs,
        {r.id: frozenset(pivots) for r in runs},
        {"continue_from": lambda t, turn, seed: Outcome(success=turn >= 2)},
        gain=lambda tid, start, end: float(end + 1 >= 2) - float(start >= 2),
    )


def test_chance_is_the_share_of_admissible_segments_holding_a_pivot() -> None:
    # 4 turns, nonterminal end: segments within turns 0..2: (0,0) (0,1) (0,2) (1,1) (1,2) (2,2); 4 hold turn 1
    case = _case([1], [True, False, False, False])
    assert math.isclose(chance(case, SegmentRules(max_turns=4), ProverConfig()), 4 / 6)
    # a group at success rate 0.5 is not eligible: no chance level
    assert math.isnan(chance(_case([1], [True, False]), SegmentRules(), ProverConfig()))
    assert hit(frozenset({1}), 0, 1) and not hit(frozenset({1}), 2, 2) and not hit(frozenset(), 0, 3)


class Fixed:
    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal:
        return Proposal(segment=Segment(trajectory_id=success.id, start=self.start, end=self.end))


def test_evaluate_scores_localisation_acceptance_and_exact_gain() -> None:
    # continuations win from turn 2 on: segment (1,1) has pre 0/8, post 8/8, Delta = 1, accepted, gain 1
    case = _case([1], [True, False, False, False])
    row = evaluate(case, Fixed(1, 1), ProverConfig(k=8)).row()
    assert (row["eligible"], row["nominated"], row["localisation"], row["acceptance"]) == (1, 1.0, 1.0, 1.0)
    assert (row["exact_gain"], row["real_accepted"]) == (1.0, 1.0)
    # segment (2,2): pre and post both win (Delta = 0, rejected), holds no pivot, gain 0
    row = evaluate(case, Fixed(2, 2), ProverConfig(k=8)).row()
    assert (row["localisation"], row["acceptance"], row["exact_gain"]) == (0.0, 0.0, 0.0)


def test_quick_harness_prints_one_table_of_judges_by_environments(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    bench = run_judge_bench(JudgeBenchSettings(groups=8, batches=1, textworld=False))
    assert set(bench.results) == {e.name for e in CORRIDORS} | {
        "FrozenLake slippery",
        "Taxi rainy",
        "CliffWalking slippery",
    }
    assert all(set(rows) == {"anchor", "divergence", "random"} for rows in bench.results.values())
    assert main(["bench", "judges", "--quick", "--no-textworld", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (
        "| environment | kind | groups | chance | anchor: loc" in out and "hidden pivot" in out and "Taxi rainy" in out
    )
    assert (tmp_path / "judges.md").is_file() and (tmp_path / "judges.json").is_file()


def test_the_llm_judge_joins_the_table_and_its_failures_count_as_no_nomination() -> None:
    """Against a scripted chat server on 127.0.0.1: a "model" that always names turn 0, and one that
    answers prose (every group skipped after the repairs: nothing nominated)."""
    from prover_core.judges.llm import LLMJudge
    from tests.chat_server import ChatServer, answer, completion

    settings = JudgeBenchSettings(groups=8, batches=1, textworld=False)
    with ChatServer([answer(0, 0)]) as server:
        bench = run_judge_bench(settings, {"llm": LLMJudge.from_url(server.url, "test-model", max_attempts=1)})
    rows = {env: r["llm"] for env, r in bench.results.items()}
    assert all(r["nominated"] == 1.0 and r["turns"] == 1.0 for r in rows.values() if r["eligible"])
    assert "llm: loc (same-length chance)" in bench.markdown()
    with ChatServer([completion("I think the agent did well.")]) as server:
        judge = LLMJudge.from_url(server.url, "test-model", max_attempts=1, max_repairs=1)
        bench = run_judge_bench(settings, {"llm": judge})
    assert all(r["llm"]["nominated"] == 0.0 for r in bench.results.values() if r["llm"]["eligible"])
