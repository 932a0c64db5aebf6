"""AnchorJudge: its statistics by hand, its choice, its declines, and admissible answers on any group."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prover_core import AnchorJudge, Decline, Proposal, SegmentRules
from tests.conftest import make_trajectory

SUCCESS = make_trajectory(
    "s", "g", True, ["east", "look", "take key", "east", "open"], ["hall", "room", "room", "room+key", "door"]
)
FAILURES = [
    make_trajectory("f1", "g", False, ["east", "east", "open"], ["hall", "room", "door"]),
    make_trajectory("f2", "g", False, ["east", "look", "east", "open"], ["hall", "room", "room", "door"]),
    make_trajectory(
        "f3", "g", False, ["wait", "east", "take key", "east", "open"], ["hall", "hall", "room", "room+key", "door"]
    ),
    make_trajectory("f4", "g", False, ["wait", "wait"], ["hall", "hall"]),
]


def test_statistics_by_hand() -> None:
    # turn 0 at 'hall': all 4 failures were there (m=4), f1-f3 went east (k=3), f1-f3 reached 'room' (n=3)
    # turn 1 at 'room': f1-f3 (m=3), f2 looked (k=1), next is 'room' again so all stay (n=3)
    # turn 2 at 'room': m=3, f3 took the key (k=1), only f3 reached 'room+key' (n=1)
    # turn 3 at 'room+key': only f3 (m=1), it went east (k=1) and reached the door (n=1)
    stats = AnchorJudge().evidence(SUCCESS, FAILURES, last=3)
    assert [(e.visited, e.took, e.went_on) for e in stats] == [(4, 3, 3), (3, 1, 3), (3, 1, 1), (1, 1, 1)]
    assert [e.p for e in stats] == [4 / 5, 2 / 4, 2 / 4, 2 / 2]
    assert [e.q for e in stats] == [4 / 5, 4 / 4, 2 / 4, 2 / 2]


def test_nominates_the_largest_jump_and_covers_nearby_evidence() -> None:
    # evidence: turn 0 (q=0.8 < 1) and turn 2 (q=0.5); turn 1 has no jump and p=0.5 > alpha; turn 3 has m=1.
    # The best is turn 2 (smallest q); with 4-turn segments it stretches back to cover turn 0.
    wide = AnchorJudge().propose(SUCCESS, FAILURES, SegmentRules(max_turns=4))
    assert isinstance(wide, Proposal) and (wide.segment.start, wide.segment.end) == (0, 2)
    assert (
        "'take key'" in wide.rationale
        and "p=0.50" in wide.rationale
        and "success rate 1/4 there, 1/2 after" in wide.rationale
    )
    narrow = AnchorJudge().propose(SUCCESS, FAILURES, SegmentRules(max_turns=2))
    assert isinstance(narrow, Proposal) and (narrow.segment.start, narrow.segment.end) == (2, 2)


def test_a_hidden_decision_counts_when_few_failures_made_it() -> None:
    # the observation never changes (a hidden pivot): no jump anywhere; 'search' at 'room' was made by no
    # failure of the 3 there, p = 1/4 <= alpha = 0.25; 'east' was made by all (p = 1).
    success = make_trajectory("s", "g", True, ["east", "search", "east", "open"], ["hall", "room", "room", "door"])
    failures = [
        make_trajectory(f"f{i}", "g", False, ["east", "east", "open"], ["hall", "room", "door"]) for i in range(3)
    ]
    p = AnchorJudge().propose(success, failures, SegmentRules(max_turns=4))
    assert isinstance(p, Proposal) and (p.segment.start, p.segment.end) == (1, 1)
    assert isinstance(AnchorJudge(alpha=0.2).propose(success, failures, SegmentRules()), Decline)


def test_declines_when_failures_made_the_same_decisions_and_lost_by_luck() -> None:
    obs, acts = ["a", "b", "c", "d"], ["x", "y", "z", "w"]
    success = make_trajectory("s", "g", True, acts, obs)
    failures = [make_trajectory(f"f{i}", "g", False, acts, obs) for i in range(3)]
    d = AnchorJudge().propose(success, failures, SegmentRules())
    assert isinstance(d, Decline) and "no anchor evidence" in d.reason and "p = (k+1)/(m+1) is 1.00" in d.reason
    # failures that never stood where the success stood are no evidence either
    elsewhere = [make_trajectory(f"f{i}", "g", False, ["x", "x"], ["u", "v"]) for i in range(3)]
    assert isinstance(AnchorJudge().propose(success, elsewhere, SegmentRules()), Decline)
    # one turn (terminal) leaves no admissible segment
    short = make_trajectory("s1", "g", True, ["x"], ["a"])
    assert isinstance(AnchorJudge().propose(short, failures, SegmentRules()), Decline)


def test_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="alpha"):
        AnchorJudge(alpha=0.0)
    with pytest.raises(ValueError, match="min_failures"):
        AnchorJudge(min_failures=0)


words = st.sampled_from(["a", "b", "c", "d"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(words, words), min_size=1, max_size=12),
    st.lists(st.lists(st.tuples(words, words), min_size=1, max_size=12), max_size=6),
    st.integers(1, 4),
)
def test_every_answer_is_admissible(
    success_turns: list[tuple[str, str]], failed: list[list[tuple[str, str]]], max_turns: int
) -> None:
    rules = SegmentRules(max_turns=max_turns)
    success = make_trajectory("s", "g", True, [a for _, a in success_turns], [o for o, _ in success_turns])
    failures = [
        make_trajectory(f"f{i}", "g", False, [a for _, a in run], [o for o, _ in run]) for i, run in enumerate(failed)
    ]
    answer = AnchorJudge().propose(success, failures, rules)
    if isinstance(answer, Proposal):
        assert rules.violation(answer.segment, success) is None
    else:
        assert answer.reason
