"""ChoiceJudge: choices compared at the same state, by hand; its levels, declines, keys and admissible answers."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prover_core import Decline, Proposal, SegmentRules, Trajectory, Turn, compute_bonus
from prover_core.judges.choice import ChoiceEvidence, ChoiceJudge, fisher_p
from prover_core.judges.combine import FirstOf
from prover_core.judges.keys import repeating_key, value_key, volatile_tokens
from prover_core.judges.random_segment import RandomJudge
from prover_core.propose import takes_others
from tests.conftest import make_trajectory

SUCCESS = make_trajectory(
    "s", "g", True, ["east", "look", "take key", "east", "open"], ["hall", "room", "room", "room+key", "door"]
)
FAILURES = [
    make_trajectory("f1", "g", False, ["east", "east", "open"], ["hall", "room", "door"]),
    make_trajectory("f2", "g", False, ["east", "look", "east", "open"], ["hall", "room", "room", "door"]),
    make_trajectory("f3", "g", False, ["east", "wait", "east", "open"], ["hall", "room", "room", "door"]),
    make_trajectory("f4", "g", False, ["wait", "wait"], ["hall", "hall"]),
]


def with_info(run: Trajectory, stochastic: list[bool]) -> Trajectory:
    turns = [t.model_copy(update={"info": {"stochastic": s}}) for t, s in zip(run.turns, stochastic, strict=True)]
    return run.model_copy(update={"turns": tuple(turns)})


def test_statistics_by_hand() -> None:
    # turn 0 at 'hall': all 4 failures were there (m=4), f1-f3 went east (k=3): p = 4/5
    # turn 1 at 'room': f1-f3 (m=3), f2 looked (k=1): p = 2/4; the anchor does not change
    # turn 2 at 'room': m=3, nobody took the key (k=0): p = 1/4; next 'room+key' no failure saw: led away
    # turn 3 at 'room+key': no failure there (m=0, k=0): p = 1; its next, 'door', the failures saw
    stats = ChoiceJudge().evidence(SUCCESS, FAILURES, last=3)
    assert [(e.visited, e.took) for e in stats] == [(4, 3), (3, 1), (3, 0), (0, 0)]
    assert [e.p for e in stats] == [4 / 5, 2 / 4, 1 / 4, 1.0]
    assert [e.changed for e in stats] == [True, False, True, True]
    assert [e.led_away for e in stats] == [False, False, True, False]


def test_nominates_one_turn_the_choice_the_failures_at_the_same_state_did_not_make() -> None:
    p = ChoiceJudge().propose(SUCCESS, FAILURES, SegmentRules(max_turns=4))
    assert isinstance(p, Proposal) and (p.segment.start, p.segment.end) == (2, 2)
    assert "'take key'" in p.rationale and "p=0.25" in p.rationale and "1 turn" in p.rationale


def test_a_jump_made_by_luck_is_not_a_choice() -> None:
    # Every run goes 'east' from 'ledge'; the success survived (reached 'far'), the failures fell. The rate
    # jumps across turn 1, but all 3 failures at 'ledge' chose the same: p = 1, no evidence. The only choice
    # evidence is 'search' at 'start' (no failure there searched, p = 1/4).
    success = make_trajectory("s", "g", True, ["search", "east", "open"], ["start", "ledge", "far"])
    failures = [make_trajectory(f"f{i}", "g", False, ["wait", "east"], ["start", "ledge"]) for i in range(3)]
    p = ChoiceJudge().propose(success, failures, SegmentRules())
    assert isinstance(p, Proposal) and (p.segment.start, p.segment.end) == (0, 0)
    # and with the same choices before the ledge, there is nothing to credit: decline
    same = [make_trajectory(f"f{i}", "g", False, ["search", "east"], ["start", "ledge"]) for i in range(3)]
    d = ChoiceJudge().propose(success, same, SegmentRules())
    assert isinstance(d, Decline) and "no choice evidence" in d.reason and "is 1.00" in d.reason


def test_a_stochastic_transition_does_not_count_as_leading_away() -> None:
    # turns 0 and 2 are both p = 1/4 choices; turn 0 reached a state no failure saw, turn 2 too.
    success = make_trajectory("s", "g", True, ["jump", "east", "pull", "open"], ["a", "b", "c", "d"])
    failures = [
        make_trajectory(f"f{i}", "g", False, ["wait", "wait", "east", "wait"], ["a", "a", "x", "c"]) for i in range(3)
    ]
    # turn 0 at 'a' (m=3, k=0, next 'b' unseen: led away); turn 2 at 'c' (m=3, k=0, next 'd' unseen: led away)
    plain = ChoiceJudge().propose(success, failures, SegmentRules())
    assert isinstance(plain, Proposal) and plain.segment.start == 0  # the earlier of two equals
    # the environment reports turn 0's transition as stochastic: reaching 'b' may be luck; turn 2 wins
    lucky = with_info(success, [True, False, False, False])
    p = ChoiceJudge().propose(lucky, failures, SegmentRules())
    assert isinstance(p, Proposal) and p.segment.start == 2


def test_divergence_is_the_weaker_level_and_can_be_turned_off() -> None:
    # one failure at 'room' (m=1): p = 1/2 is no choice evidence, but no failure there took the key
    success = make_trajectory("s", "g", True, ["east", "take key", "open"], ["hall", "room", "door"])
    failures = [make_trajectory("f1", "g", False, ["east", "east"], ["hall", "room"])]
    # 'room' -> 'door': f1 never stood at 'door' after the room? f1's observations are hall, room: 'door' unseen
    p = ChoiceJudge().propose(success, failures, SegmentRules())
    assert isinstance(p, Proposal) and p.segment.start == 1 and "no failed run at the state chose it" in p.rationale
    # a state the failure saw next: the divergence level names it, marked weaker
    failures2 = [make_trajectory("f1", "g", False, ["east", "east", "wait"], ["hall", "room", "door"])]
    p2 = ChoiceJudge().propose(success, failures2, SegmentRules())
    assert isinstance(p2, Proposal) and p2.segment.start == 1 and "divergence (weaker" in p2.rationale
    assert isinstance(ChoiceJudge(divergence=False).propose(success, failures2, SegmentRules()), Decline)


def test_partial_nonces_are_keyed_away_and_key_overrides() -> None:
    # every failure's 'room' observation carries a different reference; the repeating tokens still name it
    success = make_trajectory("s", "g", True, ["east", "take key", "open"], ["hall", "room [ref a1]", "door"])
    failures = [
        make_trajectory(f"f{i}", "g", False, ["east", "east", "wait"], ["hall", f"room [ref b{i}]", "room end"])
        for i in range(3)
    ]
    assert volatile_tokens(["room [ref a1]", "room [ref b0]", "hall"]) == {"a1]", "b0]", "hall"}
    key = repeating_key([success, *failures])
    assert key("room [ref a1]") == key("room [ref b2]") == "room [ref" and key(3) == 3
    p = ChoiceJudge().propose(success, failures, SegmentRules())
    assert isinstance(p, Proposal) and p.segment.start == 1 and "3 failed run(s)" in p.rationale
    # the whole observation as key: the 'room' states never repeat, so no failure stood there
    whole = ChoiceJudge(key=value_key, divergence=False).propose(success, failures, SegmentRules())
    assert isinstance(whole, Decline)


def test_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="alpha"):
        ChoiceJudge(alpha=0.0)
    with pytest.raises(ValueError, match="min_failures"):
        ChoiceJudge(min_failures=0)
    with pytest.raises(ValueError, match="at least one"):
        FirstOf()


class Declines:
    def propose(self, success: Trajectory, failures: list[Trajectory], rules: SegmentRules) -> Decline:
        return Decline(reason="nothing here")


def test_first_of_takes_the_first_proposal_and_joins_the_declines() -> None:
    rules = SegmentRules()
    first = asyncio.run(FirstOf(Declines(), ChoiceJudge(), RandomJudge()).propose(SUCCESS, FAILURES, rules))
    assert isinstance(first, Proposal) and first.segment.start == 2
    both = asyncio.run(FirstOf(Declines(), Declines()).propose(SUCCESS, FAILURES, rules))
    assert isinstance(both, Decline) and both.reason == "Declines: nothing here; Declines: nothing here"


words = st.sampled_from(["a", "b", "c", "d"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(words, words, st.booleans()), min_size=1, max_size=12),
    st.lists(st.lists(st.tuples(words, words), min_size=1, max_size=12), max_size=6),
    st.lists(st.lists(st.tuples(words, words), min_size=1, max_size=12), max_size=3),
    st.integers(1, 4),
)
def test_every_answer_is_one_admissible_turn(
    success_turns: list[tuple[str, str, bool]],
    failed: list[list[tuple[str, str]]],
    succeeded: list[list[tuple[str, str]]],
    max_turns: int,
) -> None:
    rules = SegmentRules(max_turns=max_turns)
    turns = [Turn(observation=o, action=a, info={"stochastic": s}) for o, a, s in success_turns]
    success = Trajectory(id="s", group_id="g", turns=turns, success=True)
    failures = [
        make_trajectory(f"f{i}", "g", False, [a for _, a in run], [o for o, _ in run]) for i, run in enumerate(failed)
    ]
    others = [
        make_trajectory(f"o{i}", "g", True, [a for _, a in run], [o for o, _ in run]) for i, run in enumerate(succeeded)
    ]
    answer = ChoiceJudge().propose(success, failures, rules, others=others)
    if isinstance(answer, Proposal):
        assert rules.violation(answer.segment, success) is None and answer.segment.num_turns == 1
        evidence = ChoiceJudge().evidence(success, failures, answer.segment.start, others)[answer.segment.start]
        assert not evidence.contradicted and 0.0 < evidence.p <= 1.0
    else:
        assert answer.reason


def test_among_choice_evidence_a_choice_that_changed_the_state_comes_before_a_no_op() -> None:
    # turn 0 'wait' at 'a' (a no-op: 'a' again) and turn 1 'pull' at 'a' (to 'b') both have m=3, k=0, p=1/4;
    # 'b' was seen by the failures, so nothing led away: the choice that changed the state wins
    success = make_trajectory("s", "g", True, ["wait", "pull", "open"], ["a", "a", "b"])
    failures = [make_trajectory(f"f{i}", "g", False, ["push", "east", "east"], ["a", "b", "c"]) for i in range(3)]
    stats = ChoiceJudge().evidence(success, failures, last=1)
    assert [(e.p, e.changed, e.led_away) for e in stats] == [(0.25, False, False), (0.25, True, False)]
    p = ChoiceJudge().propose(success, failures, SegmentRules())
    assert isinstance(p, Proposal) and p.segment.start == 1 and "choice evidence" in p.rationale


# -- other successes: the exact Fisher test over every run at the state --------------------------------


def brute_force_p(runs: int, successes: int, choosers: int, successful_choosers: int) -> float:
    """The permutation definition: every placement of the successes among the runs equally likely, the share
    of placements with at least ``successful_choosers`` of them among the first ``choosers`` runs."""
    placements = list(itertools.combinations(range(runs), successes))
    return sum(sum(r < choosers for r in p) >= successful_choosers for p in placements) / len(placements)


def test_fisher_p_by_hand_and_by_enumeration() -> None:
    assert fisher_p(8, 2, 2, 2) == pytest.approx(1 / 28)  # both successes among the 2 choosers of 8 runs
    assert fisher_p(8, 2, 1, 1) == pytest.approx(2 / 8)  # one chooser, a success: 1 - C(6,1)/C(8,1)
    assert fisher_p(5, 1, 2, 1) == pytest.approx(2 / 5)  # one success: (k+1)/(m+1) with m=4, k=1
    for runs in range(1, 9):
        for successes in range(1, runs + 1):
            for choosers in range(1, runs + 1):
                for hits in range(1, min(successes, choosers) + 1):
                    assert fisher_p(runs, successes, choosers, hits) == pytest.approx(
                        brute_force_p(runs, successes, choosers, hits)
                    )


@given(st.integers(0, 12), st.data())
def test_with_one_success_p_is_the_share_of_choosers(m: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(0, m))
    e = ChoiceEvidence(turn=0, visited=m, took=k, changed=True, stochastic=False)
    assert e.p == pytest.approx((k + 1) / (m + 1))


OTHER = make_trajectory("s2", "g", True, ["east", "take key", "east", "open"], ["hall", "room", "room+key", "door"])
STRAYED = make_trajectory("s3", "g", True, ["east", "look", "east", "open"], ["hall", "room", "room", "door"])


def test_another_success_that_chose_the_same_is_evidence() -> None:
    # turn 2 at 'room': failures as before (m=3, k=0); s2 stood at 'room' and took the key too (i=1, j=1):
    # 5 runs at 'room', 2 successes, both among the 2 choosers: p = 1/C(5,2) = 1/10 (alone: 1/4)
    stats = ChoiceJudge().evidence(SUCCESS, FAILURES, last=3, others=[OTHER])
    assert (stats[2].others_visited, stats[2].others_took) == (1, 1)
    assert stats[2].p == pytest.approx(1 / 10) and not stats[2].contradicted
    p = ChoiceJudge().propose(SUCCESS, FAILURES, SegmentRules(), others=[OTHER])
    assert isinstance(p, Proposal) and p.segment.start == 2
    assert "1 of 1 other successful run(s) there did too" in p.rationale and "p=0.10" in p.rationale


def test_another_success_that_chose_otherwise_at_the_state_contradicts_the_choice() -> None:
    # s3 stood at 'room' and never took the key: the room was won without it. Turn 2 is no candidate at any
    # level (it was the only one), so the judge declines and says why.
    stats = ChoiceJudge().evidence(SUCCESS, FAILURES, last=3, others=[STRAYED])
    assert (stats[2].others_visited, stats[2].others_took) == (1, 0) and stats[2].contradicted
    assert stats[2].p == pytest.approx(fisher_p(5, 2, 1, 1)) == pytest.approx(2 / 5)
    d = ChoiceJudge().propose(SUCCESS, FAILURES, SegmentRules(), others=[STRAYED])
    assert isinstance(d, Decline) and "1 turn(s) where other successful run(s) at the state chose otherwise" in d.reason
    # a success that never stood at 'room' says nothing about the choice there
    elsewhere = make_trajectory("s4", "g", True, ["north", "open"], ["yard", "gate"])
    e = ChoiceJudge().evidence(SUCCESS, FAILURES, last=3, others=[elsewhere])[2]
    assert (e.others_visited, e.p, e.contradicted) == (0, 0.25, False)


def test_the_smallest_p_comes_before_the_tie_preferences() -> None:
    # turn 0 'pull' at 'a' changes the state, p = 1/4 (m=3, k=0); turn 1 'wait' at 'b' is a no-op but a second
    # success waited there too and the 3 failures at 'b' did not: 5 runs, 2 successes, 2 choosers, p = 1/10
    success = make_trajectory("s", "g", True, ["pull", "wait", "open"], ["a", "b", "b"])
    failures = [make_trajectory(f"f{i}", "g", False, ["east", "east", "push"], ["a", "x", "b"]) for i in range(3)]
    other = make_trajectory("s2", "g", True, ["wait", "open"], ["b", "b"])
    stats = ChoiceJudge().evidence(success, failures, last=1, others=[other])
    assert [(round(e.p, 3), e.changed) for e in stats] == [(0.25, True), (0.1, False)]
    p = ChoiceJudge().propose(success, failures, SegmentRules(), others=[other])
    assert isinstance(p, Proposal) and p.segment.start == 1
    assert ChoiceJudge().propose(success, failures, SegmentRules()).segment.start == 0  # type: ignore[union-attr]


class KeepsOthers:
    """A judge with the keyword-only ``others``: records what compute_bonus hands it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[str], list[str]]] = []

    def propose(
        self, success: Trajectory, failures: list[Trajectory], rules: SegmentRules, *, others: Sequence[Trajectory] = ()
    ) -> Decline:
        self.seen.append((success.id, sorted(t.id for t in failures), sorted(t.id for t in others)))
        return Decline(reason="recorded")


def test_compute_bonus_hands_the_other_successes_to_judges_that_take_them() -> None:
    runs = [
        make_trajectory("a", "g", True, ["x", "y"]),
        make_trajectory("b", "g", True, ["x", "y", "z"]),
        *[make_trajectory(f"f{i}", "g", False, ["x", "x", "x"]) for i in range(6)],
    ]
    judge = KeepsOthers()
    compute_bonus(runs, judge=judge, continue_from=lambda t, b, s: True)
    assert judge.seen == [("a", [f"f{i}" for i in range(6)], ["b"])]  # the shortest success; the other one
    combined = KeepsOthers()
    compute_bonus(runs, judge=FirstOf(Declines(), combined), continue_from=lambda t, b, s: True)
    assert combined.seen == judge.seen  # FirstOf forwards them
    assert takes_others(ChoiceJudge()) and takes_others(FirstOf(Declines())) and not takes_others(Declines())


def test_a_judge_inside_first_of_without_propose_is_a_recorded_skip() -> None:
    runs = [
        make_trajectory("a", "g", True, ["x", "y"]),
        *[make_trajectory(f"f{i}", "g", False, ["x"]) for i in range(3)],
    ]
    result = compute_bonus(runs, judge=FirstOf(object()), continue_from=lambda t, b, s: True)  # type: ignore[arg-type]
    (record,) = result.report.groups
    assert record.status == "skipped" and "JudgeError" in record.reason and "propose" in record.reason
