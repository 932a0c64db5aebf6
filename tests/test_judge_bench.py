"""The judge harness: its truth (pivot labels, chance level, exact gains) is exact on small cases."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pytest

from prover_bench.batch import sample_batch
from prover_bench.judge_cases import (
    CORRIDORS,
    HELD_OUT,
    LUCK,
    NONCE,
    Case,
    TableMDP,
    TabularEnv,
    boltzmann,
    decision_gap,
    decision_values,
    epsilon_greedy,
    gym_table,
    tabular_case,
)
from prover_bench.judge_eval import (
    JudgeBenchSettings,
    SameLengthRandom,
    chance,
    eligible_groups,
    evaluate,
    hit,
    matched_decision,
    run_judge_bench,
)
from prover_bench.luck import PitCorridor
from prover_bench.oracle import ORACLE
from prover_bench.suite import ITEMS
from prover_bench.tabular import Sampler, compile_mdp, value_table
from prover_core import Proposal, ProverConfig, Segment, SegmentRules, Trajectory
from prover_core.cli import main
from prover_core.data import Outcome
from tests.conftest import importorskip, make_trajectory

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


def test_decision_values_by_hand() -> None:
    # V(s_0) = (1 + 0.3 + 0) / 3; Q - V for actions "0", "1", "2": 1 - V, 0.3 - V, -V
    c = compile_mdp(GAMBLE)
    theta = np.log(np.full(3, 1 / 3))
    batch = sample_batch(c, theta, 4, 8, np.random.default_rng(0))
    v = 1.3 / 3
    expected = np.array([1.0 - v, 0.3 - v, -v])[batch.episodes.actions[:, 0]]
    assert np.allclose(decision_values(batch)[:, 0], expected)


def test_the_case_reports_decision_value_no_effect_turns_and_stochastic_transitions() -> None:
    case = tabular_case(TabularEnv("gamble", "test", lambda: GAMBLE, lambda c: np.log(np.full(3, 1 / 3))), 4, 8, 0)
    v = 1.3 / 3
    for run in case.trajectories:
        a = run.turns[0].action
        assert math.isclose(case.decision_value(run.id, 0, 0) or 0.0, {"0": 1 - v, "1": 0.3 - v, "2": -v}[a])
        assert case.no_effect(run.id, 0, 0) == 0  # every choice moves the success probability by >= 0.13
        assert run.turns[0].info == {"stochastic": a == "1"}  # only the gamble has two outcomes


def test_pit_corridor_ends_moves_through_a_pit_by_luck() -> None:
    env = PitCorridor("p", sections=4, items=(0,), pits=(1,), pit_risk=0.5, slip=0.2, horizon=10)
    out = env.transitions((1, 1), "go east")
    assert sorted(out) == sorted(
        [(0.8 * 0.5, (2, 1), False, False), (0.2, (1, 1), False, False), (0.4, (1, 1), True, False)]
    )
    assert env.transitions((1, 1), "wait") == [(1.0, (1, 1), False, False)]
    assert "Loose rocks" in env.observe((1, 1)) and "Loose rocks" not in env.observe((0, 0))
    with pytest.raises(ValueError, match="pits"):
        PitCorridor("bad", sections=4, items=(1,), pits=(1,))
    # the move through the pit has (almost) no decision value: every run must make it; luck decides
    case = tabular_case(LUCK[0], 8, 8, 0)
    assert case.decision is not None
    through = [
        case.decision[r.id][t]
        for r in case.trajectories
        for t, turn in enumerate(r.turns)
        if "Loose rocks" in turn.observation and turn.action == "go east"
    ]
    assert through and max(abs(d) for d in through) < 0.05


def test_partial_nonces_change_only_the_share_of_observations_asked() -> None:
    case = tabular_case(NONCE[0], 4, 8, 0)
    turns = [t for r in case.trajectories for t in r.turns]
    tagged = sum("[ref " in t.observation for t in turns) / len(turns)
    assert 0.4 < tagged < 0.6
    plain = tabular_case(CORRIDORS[0], 4, 8, 0)
    assert not any("[ref " in t.observation for r in plain.trajectories for t in r.turns)


def test_held_out_designs_are_new() -> None:
    names = {e.name for e in HELD_OUT}
    assert not names & {e.name for e in (*CORRIDORS, *LUCK, *NONCE)}
    assert {e.kind for e in HELD_OUT} == {"corridor", "luck", "nonce", "gymnasium"}


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
    importorskip("gymnasium")
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


def test_boltzmann_weighs_each_action_by_exp_of_its_optimal_value_over_t() -> None:
    # by hand: Q* = (1, 0.3, 0) at the gamble's one state; at T = 0.5 the weights are e^2, e^0.6, e^0
    c = compile_mdp(GAMBLE)
    weights = np.exp([2.0, 0.6, 0.0])
    assert np.allclose(np.exp(boltzmann(0.5)(c)), weights / weights.sum())
    assert np.allclose(np.exp(boltzmann(1e-3)(c)), [1.0, 0.0, 0.0])  # cold: the greedy action, no overflow


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


def test_same_length_random_draws_segments_of_the_judges_lengths_only() -> None:
    case = _case([1], [True, False, False, False])
    run = case.trajectories[0]
    rules = SegmentRules(max_turns=4)
    for _ in range(3):
        p = SameLengthRandom({run.id: 2}, seed=_).propose(run, case.trajectories[1:], rules)
        assert isinstance(p, Proposal) and p.segment.num_turns == 2
    assert not isinstance(SameLengthRandom({}).propose(run, [], rules), Proposal)
    # exact expectation of the decision value of 2-turn segments (0,1) and (1,2): gains 1 and 1 -> values
    # come from case.decision, absent here
    assert matched_decision(case, run, 2, ProverConfig()) is None


def test_evaluate_scores_decision_value_no_effect_and_random_of_the_same_lengths() -> None:
    # decision values by hand: turn 1 is worth 1, the others 0; segment (1,2) holds 1 of value, 1 no-effect turn
    case = _case([1], [True, False, False, False])
    case.decision = {r.id: [0.0, 1.0, 0.0, 0.0] for r in case.trajectories}
    tally = evaluate(case, Fixed(1, 2), ProverConfig(k=8), same_length=True)
    row = tally.row()
    assert (row["decision"], row["no_effect"]) == (1.0, 0.5)
    # 2-turn admissible segments of the run: (0,1) and (1,2), both hold turn 1: expectation 1
    assert row["decision_same"] == 1.0
    assert tally.same is not None and tally.same.nominated == 1 and tally.same.turns == 2


def test_the_credit_and_its_decision_value_are_per_verified_segment() -> None:
    # segment (1,1): Delta = 1, accepted, decision value 1 (set by hand); segment (2,2): Delta = 0, rejected
    case = _case([1], [True, False, False, False])
    case.decision = {r.id: [0.0, 1.0, 0.0, 0.0] for r in case.trajectories}
    assert {k: evaluate(case, Fixed(1, 1), ProverConfig(k=8)).row()[k] for k in ("credited", "credited_value")} == {
        "credited": 1.0,
        "credited_value": 1.0,
    }
    row = evaluate(case, Fixed(2, 2), ProverConfig(k=8)).row()
    assert (row["credited"], row["credited_value"]) == (0.0, 0.0)
    # segment (1,2): Delta = 1 on each of its two turns, one of which (turn 2) has no effect: half the mass
    row = evaluate(case, Fixed(1, 2), ProverConfig(k=8)).row()
    assert (row["credited"], row["credited_value"], row["credited_no_effect"]) == (1.0, 1.0, 0.5)
    # cost: 8 + 8 continuations of 3 policy turns each against the batch's 4 runs x 4 turns
    case.continuations = {"continue_from": lambda t, turn, seed: Outcome(success=turn >= 2, turns=3)}
    assert evaluate(case, Fixed(1, 1), ProverConfig(k=8)).row()["extra_turns"] == 48 / 16


def test_the_tabular_host_replays_the_recorded_choice_with_fresh_transitions_and_common_random_numbers() -> None:
    # GAMBLE, uniform policy: replaying action "1" wins with probability Q = 0.3. With the same seed, the
    # pre continuation (the policy) meets the same transition number, so the pair differs only when the
    # policy chose "0" and the gamble lost (1/3 * 0.7) or chose "2" and it won (1/3 * 0.3): 1/3, against
    # 0.433 * 0.7 + 0.3 * 0.567 = 0.473 for independent continuations.
    c = compile_mdp(GAMBLE)
    sampler = Sampler(c, np.log(np.full(3, 1 / 3)))
    n = 20_000
    post = np.array([sampler.replay([c.initial], [1], 1, np.random.default_rng(i))[0] for i in range(n)])
    pre = np.array([sampler.one(c.initial, 1, np.random.default_rng(i))[0] for i in range(n)])
    assert post.mean() == pytest.approx(0.3, abs=0.015)  # 4.6 standard errors
    assert pre.mean() == pytest.approx(1.3 / 3, abs=0.015)
    assert (pre != post).mean() == pytest.approx(1 / 3, abs=0.015)


def test_the_tabular_host_hands_over_to_the_policy_off_the_recorded_path() -> None:
    # Recorded: start -0-> A -0-> win. From start, action 0 reaches A or B (1/2 each); at A action 0 wins,
    # at B action 1 wins (the uniform policy: 1/2). Replaying both turns: on the path (A) the recorded 0 wins,
    # off it (B) the policy acts: 1/2 * 1 + 1/2 * 1/2 = 0.75 (replaying 0 at B regardless would give 0.5).
    fork = TableMDP(
        "fork",
        {
            0: {0: [(0.5, 1, 0.0, False), (0.5, 2, 0.0, False)], 1: [(1.0, 2, 0.0, False)]},
            1: {0: [(1.0, 3, 1.0, True)], 1: [(1.0, 4, 0.0, True)]},
            2: {0: [(1.0, 4, 0.0, True)], 1: [(1.0, 3, 1.0, True)]},
        },
        start=0,
        horizon=2,
        n_actions=2,
        win=lambda reward: reward > 0,
    )
    c = compile_mdp(fork)
    sampler = Sampler(c, np.zeros(c.n_params))
    path, n = [c.initial, c.index[1]], 20_000
    runs = [sampler.replay(path, [0, 0], 2, np.random.default_rng(i)) for i in range(n)]
    assert np.mean([won for won, _ in runs]) == pytest.approx(0.75, abs=0.015)
    assert {turns for _, turns in runs} == {0, 1}  # replayed turns are not policy turns; off the path one is


def test_quick_harness_prints_one_table_of_judges_by_environments(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    bench = run_judge_bench(JudgeBenchSettings(groups=4, batches=1, textworld=False))
    assert set(bench.results) == {e.name for e in (*CORRIDORS, *LUCK, *NONCE)} | {
        "FrozenLake slippery",
        "Taxi rainy",
        "CliffWalking slippery",
    }
    assert all(set(rows) == {"choice", "anchor", "divergence", "random", ORACLE} for rows in bench.results.values())
    assert set(bench.families()) == {"corridor", "luck", "nonce", "gymnasium"}
    assert (
        main(
            ["bench", "judges", "--quick", "--no-textworld", "--groups", "4", "--batches", "1", "--out", str(tmp_path)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "| environment | kind | groups | chance | choice: loc" in out and "hidden pivot" in out and "Taxi rainy" in out
    )
    assert "| family | choice: value (same-length)" in out and "beats random of its lengths" in out
    assert (tmp_path / "judges.md").is_file() and (tmp_path / "judges.json").is_file()


def test_the_llm_judge_joins_the_table_and_its_failures_count_as_no_nomination() -> None:
    """Against a scripted chat server on 127.0.0.1: a "model" that always names turn 0, and one that
    answers prose (every group skipped after the repairs: nothing nominated)."""
    from prover_core.judges.llm import LLMJudge
    from tests.chat_server import ChatServer, answer, completion

    settings = JudgeBenchSettings(
        groups=4, batches=1, textworld=False, only=("hidden pivot", "rockfalls after the key")
    )
    with ChatServer([answer(0, 0)]) as server:
        bench = run_judge_bench(settings, {"llm": LLMJudge.from_url(server.url, "test-model", max_attempts=1)})
    rows = {env: r["llm"] for env, r in bench.results.items()}
    assert all(r["nominated"] == 1.0 and r["turns"] == 1.0 for r in rows.values() if r["eligible"])
    assert set(bench.results) == {"hidden pivot", "rockfalls after the key"}
    assert "llm: loc (same-length chance)" in bench.markdown() and "choice, then llm" in bench.markdown()
    with ChatServer([completion("I think the agent did well.")]) as server:
        judge = LLMJudge.from_url(server.url, "test-model", max_attempts=1, max_repairs=1)
        bench = run_judge_bench(settings, {"llm": judge})
    assert all(r["llm"]["nominated"] == 0.0 for r in bench.results.values() if r["llm"]["eligible"])


def test_the_harness_verifies_with_adaptive_sampling_when_asked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fixed, adaptive = tmp_path / "fixed", tmp_path / "adaptive"
    common = ["bench", "judges", "--quick", "--no-textworld", "--groups", "8", "--batches", "1"]
    assert main([*common, "--out", str(fixed)]) == 0
    assert main([*common, "--sampling", "adaptive", "--out", str(adaptive)]) == 0
    a, f = (json.loads((x / "judges.json").read_text()) for x in (adaptive, fixed))
    assert (a["settings"]["sampling"], f["settings"]["sampling"]) == ("adaptive", "fixed")
    assert "--sampling adaptive" in (adaptive / "judges.md").read_text()
    assert "K = 8 (adaptive)" in (adaptive / "judges.md").read_text()
    # adaptive sampling stops early where the answer is clear: fewer continuation turns over the same batches
    spent = {name: sum(r["choice"]["extra_turns"] for r in x["results"].values()) for name, x in (("a", a), ("f", f))}
    assert 0 < spent["a"] < spent["f"]


def test_case_logprobs_are_the_policys_own() -> None:
    # log pi(a | o) from the policy's logits by hand (a log-softmax over the observation's actions), on a
    # design without nonces (the observation is the compiled one) and one with stochastic outcomes
    for env in (CORRIDORS[0], LUCK[0]):
        c = compile_mdp(env.make())
        theta = env.policy(c)
        case = tabular_case(env, 4, 8, 0, logprobs=True)
        assert "logprob" not in tabular_case(env, 1, 2, 0).trajectories[0].turns[0].info
        for run in case.trajectories:
            for turn in run.turns:
                o = c.observations.index(turn.observation)
                block = theta[c.offset[o] : c.offset[o + 1]]
                j = c.obs_actions[o].index(turn.action)
                expected = block[j] - math.log(sum(math.exp(x) for x in block))
                assert turn.info["logprob"] == pytest.approx(expected, abs=1e-12)
                assert set(turn.info) == {"stochastic", "logprob"}


def test_eligible_groups_are_what_compute_bonus_hands_a_judge() -> None:
    # the shortest success, every failed run, and the other successes; only groups with 0 < rate < 0.5
    config = ProverConfig()
    case = tabular_case(CORRIDORS[0], 16, 8, 0)
    seen = 0
    for run, failures, others in eligible_groups(case, config):
        members = [t for t in case.trajectories if t.group_id == run.group_id]
        wins = [t for t in members if t.success]
        assert run.success and run.num_turns == min(t.num_turns for t in wins)
        assert sorted(t.id for t in failures) == sorted(t.id for t in members if not t.success)
        assert sorted(t.id for t in others) == sorted(t.id for t in wins if t.id != run.id)
        assert 0 < len(wins) / len(members) < 0.5
        seen += 1
    groups = {t.group_id for t in case.trajectories}
    rates = [sum(t.success for t in case.trajectories if t.group_id == g) / 8 for g in groups]
    assert seen == sum(0 < r < 0.5 for r in rates) > 0
