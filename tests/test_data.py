import pytest
from pydantic import ValidationError

from prover_core import Decline, InvalidSegmentError, Segment, SegmentRules, Trajectory, Turn
from tests.conftest import make_trajectory


@pytest.mark.parametrize(
    "value, expected", [(True, True), (False, False), (1, True), (0, False), (1.0, True), (0.0, False)]
)
def test_success_accepts_binary_values(value: object, expected: bool) -> None:
    t = Trajectory(id="a", group_id="g", turns=[Turn(observation="o", action="x")], success=value)
    assert t.success is expected


@pytest.mark.parametrize("value", [0.5, 2, -1, "true", "1", None, 0.999])
def test_success_rejects_non_binary_rewards(value: object) -> None:
    with pytest.raises(ValidationError, match="binary"):
        Trajectory(id="a", group_id="g", turns=[Turn(observation="o", action="x")], success=value)


def test_trajectory_needs_turns_and_ids() -> None:
    with pytest.raises(ValidationError):
        Trajectory(id="a", group_id="g", turns=[], success=True)
    with pytest.raises(ValidationError):
        Trajectory(id="", group_id="g", turns=[Turn(observation="o", action="x")], success=True)


def test_token_spans_must_be_ordered_and_disjoint() -> None:
    with pytest.raises(ValidationError, match="0 <= start <= end"):
        Turn(observation="o", action="x", token_span=(5, 3))
    with pytest.raises(ValidationError, match="overlap"):
        Trajectory(
            id="a",
            group_id="g",
            success=True,
            turns=[
                Turn(observation="o", action="x", token_span=(0, 4)),
                Turn(observation="p", action="y", token_span=(3, 6)),
            ],
        )


def test_segment_is_inclusive_and_ordered() -> None:
    assert Segment(trajectory_id="a", start=2, end=4).num_turns == 3
    with pytest.raises(ValidationError):
        Segment(trajectory_id="a", start=3, end=2)
    with pytest.raises(ValidationError):
        Segment(trajectory_id="a", start=-1, end=2)


def test_segment_rules_name_each_violation() -> None:
    t = make_trajectory("a", "g", True, list("abcdef"))  # turns 0..5
    rules = SegmentRules(max_turns=2, nonterminal_end=True)
    assert rules.violation(Segment(trajectory_id="a", start=3, end=4), t) is None
    assert "terminal" in str(rules.violation(Segment(trajectory_id="a", start=5, end=5), t))
    assert "out of range" in str(rules.violation(Segment(trajectory_id="a", start=5, end=6), t))
    assert "at most 2" in str(rules.violation(Segment(trajectory_id="a", start=0, end=2), t))
    assert "expected 'a'" in str(rules.violation(Segment(trajectory_id="b", start=0, end=0), t))
    with pytest.raises(InvalidSegmentError):
        rules.check(Segment(trajectory_id="a", start=5, end=5), t)
    assert (
        SegmentRules(max_turns=2, nonterminal_end=False).violation(Segment(trajectory_id="a", start=5, end=5), t)
        is None
    )


def test_last_end_is_t_minus_2_under_a_nonterminal_end_else_t_minus_1_and_its_decline() -> None:
    nonterminal, terminal = SegmentRules(), SegmentRules(nonterminal_end=False)
    assert [nonterminal.last_end(n) for n in (1, 2, 6)] == [-1, 0, 4]
    assert [terminal.last_end(n) for n in (1, 2, 6)] == [0, 1, 5]
    one = make_trajectory("a", "g", True, ["x"])
    declined = nonterminal.no_segment(one)
    assert isinstance(declined, Decline) and declined.reason == "trajectory has 1 turns: no admissible segment"
    assert terminal.no_segment(one) is None
    assert nonterminal.no_segment(make_trajectory("b", "g", True, list("xy"))) is None
    for rules in (nonterminal, terminal):  # the last end is the largest end among the admissible segments
        t = make_trajectory("c", "g", True, list("abcde"))
        assert max(s.end for s in rules.candidates(t)) == rules.last_end(t.num_turns)


def test_candidates_are_exactly_the_admissible_segments() -> None:
    t = make_trajectory("a", "g", True, list("abcde"))  # 5 turns, nonterminal: ends <= 3
    rules = SegmentRules(max_turns=2)
    got = {(s.start, s.end) for s in rules.candidates(t)}
    # starts 0..3, length 1 or 2, end <= 3: (0,0)(0,1)(1,1)(1,2)(2,2)(2,3)(3,3)
    assert got == {(0, 0), (0, 1), (1, 1), (1, 2), (2, 2), (2, 3), (3, 3)}
    assert all(rules.violation(s, t) is None for s in rules.candidates(t))
    assert SegmentRules().candidates(make_trajectory("b", "g", True, ["a"])) == []


def test_token_end_is_where_the_last_span_ends() -> None:
    turns = (Turn(observation="o", action="a", token_span=(2, 5)), Turn(observation="o", action="b"))
    assert Trajectory(id="t", group_id="g", turns=turns, success=True).token_end == 5
    spanless = (Turn(observation="o", action="a"),)
    assert Trajectory(id="t", group_id="g", turns=spanless, success=True).token_end == 0
