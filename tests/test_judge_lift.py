"""The judge against chance, live: control groups, the lift across steps, the credit per extra turn."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from prover_bench.judge_cases import CORRIDORS, LUCK
from prover_core import Outcome, Proposal, ProverConfig, RandomJudge, Segment, SegmentRules, Trajectory, compute_bonus
from prover_core.allocate import Case
from prover_core.bonus import _control
from prover_core.chance import Lift
from prover_core.report import GroupRecord, Report
from prover_core.run import ProverRun
from tests.conftest import load_script, make_trajectory

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "judge_lift.py"


class FixedJudge:
    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal:
        return Proposal(segment=Segment(trajectory_id=success.id, start=self.start, end=self.end), rationale="fixed")


def groups(n: int, turns: int = 8) -> list[Trajectory]:
    """``n`` eligible groups of 4 (one success of ``turns`` turns, three failures)."""
    out = []
    for g in range(n):
        out.append(make_trajectory(f"g{g}-0", f"g{g}", True, [f"a{g}"] * turns))
        out += [make_trajectory(f"g{g}-{i}", f"g{g}", False, [f"b{g}"] * (turns + 1)) for i in (1, 2, 3)]
    return out


def from_turn(threshold: int, turns: int = 3):  # type: ignore[no-untyped-def]
    """A continuation succeeds from turn >= threshold and always takes ``turns`` policy turns."""
    return lambda trajectory, turn, seed: Outcome(turn >= threshold, turns)


def test_controls_verify_a_random_segment_of_the_judges_length() -> None:
    config = ProverConfig(control_share=0.5)
    r = compute_bonus(groups(40), judge=FixedJudge(1, 2), continue_from=from_turn(3), config=config)
    controls = [g for g in r.report.groups if g.control]
    judged = [g for g in r.report.groups if not g.control]
    assert 10 <= len(controls) <= 30  # about half of 40
    assert all(g.proposal is not None and (g.proposal.segment.start, g.proposal.segment.end) == (1, 2) for g in judged)
    starts = set()
    for g in controls:
        assert g.proposal is not None
        seg = g.proposal.segment
        assert seg.num_turns == 2 and 0 <= seg.start <= 5  # last admissible end of 8 turns: 6
        assert "the judge nominated turns [1, 2]" in g.proposal.rationale
        starts.add(seg.start)
    assert len(starts) > 2  # drawn, not fixed
    # a control's accepted credit is used like any other: a bonus on its own segment
    for g in controls:
        if g.status == "accepted":
            assert g.proposal is not None and g.trajectory_id is not None
            bonus = r.turn_bonus[g.trajectory_id]
            seg = g.proposal.segment
            assert all(bonus[t] == 1.0 for t in range(seg.start, seg.end + 1)) and bonus.sum() == 2.0


def test_share_one_makes_every_gain_group_a_control_and_zero_none() -> None:
    every = compute_bonus(
        groups(6), judge=FixedJudge(1, 2), continue_from=from_turn(3), config=ProverConfig(control_share=1)
    )
    assert all(g.control for g in every.report.groups)
    none = compute_bonus(groups(6), judge=FixedJudge(1, 2), continue_from=from_turn(3))
    assert not any(g.control for g in none.report.groups)
    assert none.report.lift is None and "prover/judge_lift" not in none.report.metrics()


def test_controls_are_drawn_afresh_for_new_episodes_with_the_same_ids() -> None:
    """The draw depends on the examined run's content: the same group ids in another step get another split."""
    config = ProverConfig(control_share=0.5)
    first = compute_bonus(groups(24), judge=FixedJudge(1, 2), continue_from=from_turn(3), config=config)
    later = compute_bonus(groups(24, turns=9), judge=FixedJudge(1, 2), continue_from=from_turn(3), config=config)
    again = compute_bonus(groups(24), judge=FixedJudge(1, 2), continue_from=from_turn(3), config=config)
    split = [[g.control for g in r.report.groups] for r in (first, later, again)]
    assert split[0] != split[1] and split[0] == split[2]


def test_no_segment_of_the_length_is_a_visible_decline() -> None:
    run = make_trajectory("s", "g", True, list("abc"))  # admissible ends 0..1: no 3-turn segment
    case = Case("g", [run, make_trajectory("f", "g", False, list("abcd"))], "gain", control=True)
    rules = ProverConfig(control_share=1).stages.propose.rules
    out = _control(case, Segment(trajectory_id="other", start=0, end=2), rules, seed=0)
    assert isinstance(out, GroupRecord) and out.status == "declined" and out.control
    assert "no admissible segment of 3 turns" in out.reason and "[0, 2]" in out.reason


def record(status: str, control: bool = False, direction: str = "gain") -> GroupRecord:
    return GroupRecord(group_id="x", size=4, successes=1, status=status, control=control, direction=direction)  # type: ignore[arg-type]


def test_step_lift_counts_decided_gain_groups_by_kind() -> None:
    report = Report(
        groups=[
            *(record("accepted") for _ in range(3)),
            record("rejected"),
            record("skipped"),  # not decided
            record("accepted", control=True),
            *(record("rejected", control=True) for _ in range(2)),
            record("declined", control=True),  # not decided
            record("accepted", direction="drop"),  # negative credit: not the judge's lift
        ]
    )
    assert report.step_lift == Lift(3, 4, 1, 3)
    m = report.model_copy(update={"lift": report.step_lift}).metrics()
    assert m["prover/judge_lift"] == pytest.approx(3 / 4 - 1 / 3)
    assert m["prover/judge_verified"] == 4 and m["prover/control_verified"] == 3
    assert m["prover/groups_control"] == 4
    assert m["prover/judge_lift_low"] < m["prover/judge_lift"] < m["prover/judge_lift_high"]


def test_a_runs_window_pools_its_steps() -> None:
    config = ProverConfig(control_share=0.5, lift_window=2)
    run = ProverRun(FixedJudge(1, 2), config, continue_from=from_turn(3))
    assert run.window is not None
    steps = []
    for turns in (8, 9, 10):
        r = run.step(groups(12, turns))
        steps.append(r.report.step_lift)
        assert r.report.lift == run.window.total
    assert run.window.total == steps[1] + steps[2]  # the first step dropped out of a 2-step window
    assert run.steps == 3
    # compute_bonus alone is one step: at the third step's seed (config.seed + 2) its lift is that step's counts
    third = config.model_copy(update={"seed": config.seed + 2})
    alone = compute_bonus(groups(12, 10), judge=FixedJudge(1, 2), continue_from=from_turn(3), config=third)
    assert alone.report.lift == steps[2]


def test_credit_per_extra_turn_is_the_credit_added_per_policy_turn_spent() -> None:
    """One group, segment [1, 2] (2 turns), Delta = 1 (pre from turn 1 fails, post from turn 3 succeeds), lam 0.5:
    credit 0.5 * 1 * 2 = 1, over the policy turns of its continuations (3 each)."""
    r = compute_bonus(groups(1), judge=FixedJudge(1, 2), continue_from=from_turn(3), config=ProverConfig(lam=0.5))
    (g,) = r.report.groups
    assert g.status == "accepted" and g.credit == pytest.approx(1.0)
    m = r.report.metrics()
    assert m["prover/policy_turns"] == 3 * m["prover/continuations"] > 0
    assert m["prover/credit_per_extra_turn"] == pytest.approx(1.0 / m["prover/policy_turns"])
    rejected = compute_bonus(groups(1), judge=FixedJudge(4, 5), continue_from=from_turn(3))
    assert rejected.report.groups[0].credit == 0.0
    assert rejected.report.metrics()["prover/credit_per_extra_turn"] == 0.0


def test_random_judge_lift_is_nan_until_both_kinds_are_decided() -> None:
    r = compute_bonus(groups(3), judge=RandomJudge(0), continue_from=from_turn(3), config=ProverConfig(control_share=1))
    m = r.report.metrics()
    assert m["prover/judge_verified"] == 0 and math.isnan(m["prover/judge_lift"])


def test_on_the_exact_suites_the_oracle_beats_chance_and_the_random_judge_does_not() -> None:
    """``benchmarks/judge_lift.py``'s run (its defaults: 4 steps of 32 groups, control_share 0.5): the oracle's lift
    interval lies above 0 on every environment but the one where luck, not choices, decides, and pooled; the random
    judge's holds 0 on every environment and pooled (docs/verification.md has the table)."""
    bench = load_script(SCRIPT, "judge_lift")
    pooled = {"oracle": Lift(), "random": Lift()}
    for i, env in enumerate((*CORRIDORS, *LUCK)):
        out = bench.run(i, 4, 32, 0.5)
        for name in pooled:
            pooled[name] += out[name][0]
        low, high = out["random"][0].interval()
        assert low < 0 < high, env.name
        if env.name != "luck-dominated slips":
            assert out["oracle"][0].interval()[0] > 0, env.name
    assert pooled["oracle"].interval()[0] > 0.4
    low, high = pooled["random"].interval()
    assert low < 0 < high


def test_the_groups_needed_shrink_with_the_lift_and_make_the_interval_exclude_zero() -> None:
    bench = load_script(SCRIPT, "judge_lift")
    n = bench.needed(0.3, 0.25)
    assert bench.needed(0.2, 0.25) > n > bench.needed(0.4, 0.25)
    nc = round(n * 0.25)
    assert Lift(round((n - nc) * 0.495), n - nc, round(nc * 0.195), nc).interval()[0] > 0
    nc = round((n - 1) * 0.25)
    assert Lift(round((n - 1 - nc) * 0.495), n - 1 - nc, round(nc * 0.195), nc).interval()[0] <= 0


@pytest.mark.parametrize(
    ("window_counts", "throttled"),
    [(Lift(10, 10, 0, 10), False), (Lift(5, 10, 5, 10), True), (Lift(9, 10, 0, 0), False)],
)
def test_the_throttle_verifies_the_judges_groups_at_the_controls_rate_while_the_lift_is_not_shown(
    window_counts: Lift, throttled: bool
) -> None:
    """Above chance (interval above 0) or nothing to compare yet: every group; otherwise the judge's own groups at
    ``control_share / (1 - control_share)`` (1/3 at 0.25), the controls all."""
    config = ProverConfig(control_share=0.25, lift_throttle=True, lift_window=5)
    run = ProverRun(FixedJudge(1, 2), config, continue_from=from_turn(3))
    assert run.window is not None
    run.window.add(window_counts)  # as if earlier steps had counted these
    r = run.step(groups(80))
    left = [g for g in r.report.groups if g.status == "unverified"]
    assert all(not g.control and "lift_throttle" in g.reason for g in left)
    judged = sum(not g.control for g in r.report.groups)
    if throttled:
        assert 0.45 < len(left) / judged < 0.85  # about 2/3 of the judge's groups left out
    else:
        assert not left


def test_on_the_exact_suites_the_throttle_cuts_a_random_judges_turns_and_not_the_oracles() -> None:
    """``benchmarks/judge_lift.py``'s third table (4 steps of 32 groups, control_share 0.25), on the environments
    where the oracle's lift shows in the first step."""
    bench = load_script(SCRIPT, "judge_lift")
    for i in (0, 1, 3):
        out = bench.throttled(i, 4, 32, 0.25)
        assert out["oracle"][1] == out["oracle"][0]
        assert out["random"][1] < 0.75 * out["random"][0]
