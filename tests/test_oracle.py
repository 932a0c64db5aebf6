"""The harness's ceiling: the admissible turn with the largest exact decision value, and where there is none."""

from __future__ import annotations

from prover_bench.judge_eval import JudgeBenchSettings, run_judge_bench
from prover_bench.oracle import ORACLE, BestTurn, nothing_to_find
from prover_core import Proposal, SegmentRules
from tests.conftest import make_trajectory


def test_the_best_turn_is_the_admissible_one_with_the_largest_decision_value() -> None:
    run = make_trajectory("s", "g", True, ["a", "b", "c", "d", "e"])
    rules = SegmentRules(max_turns=4)  # nonterminal end: turn 4 is not admissible
    # by hand: turn 4 is worth most but is terminal; of turns 0..3, turn 2 (+0.3) is best
    answer = BestTurn({"s": [0.1, -0.2, 0.3, 0.0, 0.9]}).propose(run, [], rules)
    assert isinstance(answer, Proposal) and (answer.segment.start, answer.segment.end) == (2, 2)
    assert "+0.300" in answer.rationale
    # ties go to the earliest turn
    tie = BestTurn({"s": [0.0, 0.2, 0.2, 0.1, 0.0]}).propose(run, [], rules)
    assert isinstance(tie, Proposal) and tie.segment.start == 1
    # a negative best is still the best: the ceiling, not a claim that the turn helped
    low = BestTurn({"s": [-0.3, -0.1, -0.2, -0.4, 0.0]}).propose(run, [], rules)
    assert isinstance(low, Proposal) and low.segment.start == 1


def test_without_exact_values_or_admissible_turns_it_declines() -> None:
    run = make_trajectory("s", "g", True, ["a", "b"])
    assert not isinstance(BestTurn({}).propose(run, [], SegmentRules()), Proposal)
    one = make_trajectory("one", "g", True, ["a"])  # one turn, terminal: nothing admissible
    assert not isinstance(BestTurn({"one": [0.5]}).propose(one, [], SegmentRules()), Proposal)


def test_nothing_to_find_names_the_environments_where_even_the_best_turn_had_no_effect() -> None:
    results = {
        "flat": {ORACLE: {"no_effect": 1.0}, "choice": {"no_effect": 1.0}},
        "peaked": {ORACLE: {"no_effect": 0.5}, "choice": {"no_effect": 1.0}},
        "no oracle (TextWorld)": {"choice": {"no_effect": float("nan")}},
    }
    assert nothing_to_find(results) == ["flat"]


def test_the_harness_reports_the_ceiling_on_tabular_environments() -> None:
    bench = run_judge_bench(
        JudgeBenchSettings(groups=4, batches=1, textworld=False, only=("hidden pivot", "FrozenLake slippery"))
    )
    assert set(bench.results) == {"hidden pivot", "FrozenLake slippery"}
    compared = 0
    for env, rows in bench.results.items():
        best = rows[ORACLE]
        assert best["eligible"] >= 1, env  # both environments have eligible groups at these settings
        # one turn in every eligible group; the best turn is worth at least a random turn of the same run
        assert (best["nominated"], best["turns"]) == (1.0, 1.0), env
        assert best["decision"] >= best["decision_same"], env
        for judge in ("choice", "divergence"):  # one-turn judges, on a subset of the same groups
            if rows[judge]["nominated"] == 1.0:
                assert rows[judge]["decision"] <= best["decision"] + 1e-12, (env, judge)
                compared += 1
    assert compared >= 2  # the comparison with a judge ran (the choice judge nominates on one environment only)
    assert ORACLE in bench.markdown()
