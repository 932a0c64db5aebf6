"""The judge against chance: the control draw, Wilson's interval, Newcombe's interval of the lift, the window.

The intervals are checked against published figures: Wilson's score interval for 81/263 (0.2553, 0.3662) and
Newcombe's hybrid score interval (method 10) for the six examples of his Table II (Newcombe, "Interval estimation
for the difference between independent proportions: comparison of eleven methods", Statistics in Medicine 1998).
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from prover_core.chance import Lift, LiftWindow, control_segment, is_control, wilson
from prover_core.data import Segment, SegmentRules, Trajectory, Turn


def _run(turns: int, tid: str = "t") -> Trajectory:
    return Trajectory(id=tid, group_id="g", turns=tuple(Turn(observation=str(i), action="a") for i in range(turns)),
                      success=True)  # fmt: skip


def _start(segment: Segment | None) -> int:
    assert segment is not None
    return segment.start


def test_wilson_matches_the_published_interval() -> None:
    low, high = wilson(81, 263)
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)
    assert wilson(0, 0) == (0.0, 1.0)
    low, high = wilson(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)


@pytest.mark.parametrize(
    ("a", "n", "b", "m", "expected"),
    [
        (56, 70, 48, 80, (0.0524, 0.3339)),
        (9, 10, 3, 10, (0.1705, 0.8090)),
        (6, 7, 2, 7, (0.0582, 0.8062)),
        (5, 56, 0, 29, (-0.0381, 0.1926)),
        (0, 10, 0, 20, (-0.1611, 0.2775)),
        (10, 10, 0, 20, (0.6791, 1.0000)),
    ],
)
def test_the_lift_interval_matches_newcombes_table(
    a: int, n: int, b: int, m: int, expected: tuple[float, float]
) -> None:
    lift = Lift(a, n, b, m)
    assert lift.lift == pytest.approx(a / n - b / m)
    low, high = lift.interval()
    assert (round(low, 4), round(high, 4)) == expected


def test_the_lift_is_undefined_until_both_kinds_are_verified_and_its_metrics_carry_the_counts() -> None:
    assert math.isnan(Lift(3, 4, 0, 0).lift) and all(math.isnan(x) for x in Lift(3, 4, 0, 0).interval())
    m = Lift(9, 10, 3, 10).metrics()
    assert m["prover/judge_lift"] == pytest.approx(0.6)
    assert (round(m["prover/judge_lift_low"], 4), round(m["prover/judge_lift_high"], 4)) == (0.1705, 0.809)
    assert (m["prover/judge_accept_rate"], m["prover/control_accept_rate"]) == (0.9, 0.3)
    assert (m["prover/judge_verified"], m["prover/control_verified"]) == (10.0, 10.0)


def test_the_window_keeps_the_last_steps_only() -> None:
    window = LiftWindow(steps=2)
    assert window.add(Lift(1, 2, 0, 1)) == Lift(1, 2, 0, 1)
    assert window.add(Lift(2, 2, 1, 1)) == Lift(3, 4, 1, 2)
    assert window.add(Lift(0, 1, 0, 0)) == Lift(2, 3, 1, 1)  # the first step dropped out
    with pytest.raises(ValueError, match="at least 1"):
        LiftWindow(0)


def test_the_control_segment_is_uniform_over_admissible_starts_of_the_same_length() -> None:
    """10 turns, nonterminal end: the last admissible end is 8, so a 3-turn segment starts at 0..6 (7 starts), each
    with probability 1/7; over 7,000 trajectories each start's count is within 5 sd of 1,000."""
    rules = SegmentRules(max_turns=4)
    counts = Counter()
    for i in range(7000):
        seg = control_segment(_run(10, f"t{i}"), 3, rules, seed=1)
        assert seg is not None and seg.num_turns == 3 and rules.violation(seg, _run(10, f"t{i}")) is None
        counts[seg.start] += 1
    assert sorted(counts) == list(range(7))
    sd = math.sqrt(7000 * (1 / 7) * (6 / 7))
    assert all(abs(c - 1000) < 5 * sd for c in counts.values())
    # reproducible, and the seed matters
    assert control_segment(_run(10, "x"), 2, rules, 3) == control_segment(_run(10, "x"), 2, rules, 3)
    assert len({_start(control_segment(_run(10, "x"), 1, rules, s)) for s in range(40)}) > 1
    # the terminal turn is admissible when the rules allow it: 1-turn segments start at 0..9
    starts = {_start(control_segment(_run(10, f"u{i}"), 1, SegmentRules(nonterminal_end=False))) for i in range(400)}
    assert starts == set(range(10))
    # no segment of that length fits, or the length breaks the rules
    only = control_segment(_run(3, "s"), 2, rules)  # admissible ends 0..1: one 2-turn segment fits
    assert only is not None and (only.start, only.end) == (0, 1)
    assert control_segment(_run(2, "s"), 2, rules) is None
    assert control_segment(_run(10, "s"), 5, rules) is None and control_segment(_run(10, "s"), 0, rules) is None


def test_about_the_share_of_groups_are_controls_whatever_their_order() -> None:
    ids = [f"g{i}" for i in range(20000)]
    picked = [g for g in ids if is_control(g, 0.25, seed=7)]
    assert abs(len(picked) - 5000) < 5 * math.sqrt(20000 * 0.25 * 0.75)
    assert picked == [g for g in reversed(ids) if is_control(g, 0.25, seed=7)][::-1]
    assert picked != [g for g in ids if is_control(g, 0.25, seed=8)]
    assert not any(is_control(g, 0.0) for g in ids[:100]) and all(is_control(g, 1.0) for g in ids[:100])
