"""The two judges that need no network."""

from collections import Counter

from prover_core import Decline, DivergenceJudge, Proposal, RandomJudge, SegmentRules
from tests.conftest import make_trajectory

RULES = SegmentRules(max_turns=4)


def test_divergence_finds_the_turn_failures_never_took() -> None:
    success = make_trajectory(
        "s", "g", True, ["north", "take key", "east", "open"], ["hall", "key room", "corridor", "vault"]
    )
    failures = [
        make_trajectory("f1", "g", False, ["north", "east", "east", "open"], ["hall", "key room", "corridor", "vault"]),
        make_trajectory(
            "f2", "g", False, ["north", "wait", "east", "east"], ["hall", "key room", "key room", "corridor"]
        ),
    ]
    p = DivergenceJudge().propose(success, failures, RULES)
    assert isinstance(p, Proposal)
    assert (p.segment.start, p.segment.end) == (1, 1) and "take key" in p.rationale and "2 failed" in p.rationale


def test_divergence_prefers_the_decision_that_leads_somewhere_new() -> None:
    # turn 0: a harmless 'wait' nobody else did (next observation 'hall' is familiar);
    # turn 1: 'take key', after which the observation 'hall+key' was never seen by a failure.
    success = make_trajectory(
        "s", "g", True, ["wait", "take key", "east", "open"], ["hall", "hall", "hall+key", "vault+key"]
    )
    failures = [
        make_trajectory(f"f{i}", "g", False, ["east", "east", "east"], ["hall", "hall", "vault"]) for i in range(3)
    ]
    p = DivergenceJudge().propose(success, failures, RULES)
    assert isinstance(p, Proposal) and p.segment.start == 1


def test_divergence_declines_when_nothing_differs_and_respects_the_terminal_rule() -> None:
    same = ["a", "b", "c"]
    success = make_trajectory("s", "g", True, same)
    p = DivergenceJudge().propose(success, [make_trajectory("f", "g", False, same)], RULES)
    assert isinstance(p, Decline)
    # the only divergence is the terminal turn: declined under the nonterminal rule, taken without it
    success = make_trajectory("s", "g", True, ["a", "b", "win"])
    fail = make_trajectory("f", "g", False, ["a", "b", "lose"])
    assert isinstance(DivergenceJudge().propose(success, [fail], RULES), Decline)
    p = DivergenceJudge().propose(success, [fail], SegmentRules(max_turns=4, nonterminal_end=False))
    assert isinstance(p, Proposal) and p.segment.start == 2


def test_random_judge_is_valid_reproducible_and_covers_every_candidate() -> None:
    traj = make_trajectory("s", "g", True, list("abcdef"))
    rules = SegmentRules(max_turns=2)
    p = RandomJudge(seed=1).propose(traj, [], rules)
    assert isinstance(p, Proposal) and rules.violation(p.segment, traj) is None
    assert RandomJudge(seed=1).propose(traj, [], rules) == p
    counts: Counter[tuple[int, int]] = Counter()
    for i in range(900):
        t = make_trajectory(f"s{i}", "g", True, list("abcdef"))
        q = RandomJudge(seed=0).propose(t, [], rules)
        assert isinstance(q, Proposal)
        counts[(q.segment.start, q.segment.end)] += 1
    candidates = {(s.start, s.end) for s in rules.candidates(traj)}
    assert set(counts) == candidates  # 9 candidates, ~100 each
    assert max(counts.values()) < 160 and min(counts.values()) > 50
    assert isinstance(RandomJudge().propose(make_trajectory("x", "g", True, ["a"]), [], rules), Decline)
