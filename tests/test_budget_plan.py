"""``plan``'s greedy knapsack rule by rule, and the turn cap's edges (issue 55).

Each case is built so that the documented rule changes the answer: a group that does not fit is skipped (a cheaper
one after it may still fit), equal scores keep the given order, a group that exactly fills the cap fits, a group
of zero cost always fits. Then the cap's boundary where it is applied: :class:`Admission` (a reservation of exactly
what is left starts, one more does not) and the budget step of ``compute_bonus`` (a group whose expected cost is
the cap is verified, under a cap one lower it is left unverified).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prover_core import Outcome, Proposal, ProverConfig, Segment, compute_bonus
from prover_core.budget import Admission, GroupShare, TurnBudget, expected_cost, plan
from tests.conftest import make_trajectory

# -- plan -------------------------------------------------------------------------------------------


def test_a_group_that_does_not_fit_is_skipped_and_a_cheaper_one_after_it_still_fits() -> None:
    # by score: A (10) overflows a cap of 5 and is skipped; B (3) after it fits
    assert plan([10, 3], [2, 1], 5) == [False, True]
    # A (4) kept; B (10): 14 > 8, skipped; C (3): 4 + 3 = 7 <= 8, kept beside A
    assert plan([4, 10, 3], [3, 2, 1], 8) == [True, False, True]


def test_equal_scores_keep_the_given_order_when_only_one_fits() -> None:
    assert plan([5, 5], [1, 1], 5) == [True, False]
    assert plan([6, 4], [1, 1], 6) == [True, False]  # the first given wins although the second is cheaper
    # B by its score (3), then A before C: 3 + 3 = 6 fills the cap, C's 9 > 6
    assert plan([3, 3, 3], [0, 1, 0], 6) == [True, True, False]


def test_a_group_that_exactly_fills_the_cap_fits_and_one_turn_over_does_not() -> None:
    assert plan([5, 3], [2, 1], 8) == [True, True]  # 5 + 3 == 8
    assert plan([5, 3], [2, 1], 7) == [True, False]  # 5 + 3 == 7 + 1
    assert plan([8], [1], 8) == [True]
    assert plan([8], [1], 7) == [False]
    assert plan([6.5, 1.5], [1, 0], 8) == [True, True]  # expected costs are means: 6.5 + 1.5 == 8.0 exactly


def test_a_zero_cost_group_fits_a_zero_cap_a_full_cap_and_after_a_skipped_group() -> None:
    assert plan([0, 0], [1, 2], 0) == [True, True]  # 0 + 0 <= 0
    assert plan([5, 0, 2], [3, 2, 1], 5) == [True, True, False]  # the cap is full at 5; 5 + 0 <= 5, 5 + 2 > 5
    assert plan([9, 0], [2, 1], 5) == [False, True]
    assert plan([], [], 3) == []


@given(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 2)), max_size=7), st.integers(0, 20))
def test_the_plan_keeps_within_the_cap_and_leaves_out_only_groups_that_overflow_beside_those_ranked_before(
    groups: list[tuple[int, int]], cap: int
) -> None:
    """The two properties that determine the greedy answer: the kept groups' costs add up to at most ``cap``, and a
    group left out overflows the cap beside the kept groups ranked before it (higher score, or an equal score given
    earlier). Small integer scores and costs: ties, exact fits and zero costs are frequent."""
    costs, scores = [c for c, _ in groups], [s for _, s in groups]
    keep = plan(costs, scores, cap)
    assert len(keep) == len(groups)
    assert sum(c for c, kept in zip(costs, keep, strict=True) if kept) <= cap
    for i in (i for i, kept in enumerate(keep) if not kept):
        before = sum(costs[j] for j in range(len(costs)) if keep[j] and (-scores[j], j) < (-scores[i], i))
        assert before + costs[i] > cap, (i, before)


# -- the cap where it is applied ------------------------------------------------------------------------


def test_admission_starts_a_reservation_of_exactly_what_is_left_and_not_one_more() -> None:
    """By hand: a pool of 10. A reservation of 10 starts (0 left) and ends unused (10 back); with a share of 4
    running, one of 6 starts at once (0 left); with nothing running, one of 11 never starts."""

    async def scenario() -> list[object]:
        pool = TurnBudget(10)
        admission = Admission(pool)
        whole = await admission.enter(10)
        assert isinstance(whole, GroupShare) and whole.limit == 10 and pool.left == 0
        await admission.leave(whole)
        events: list[object] = [pool.left]
        four = await admission.enter(4)
        six = await asyncio.wait_for(admission.enter(6), 1.0)  # exactly the 6 left: no wait for the 4 to end
        assert four is not None and six is not None
        events.append((six.limit, pool.left))
        await admission.leave(six)
        await admission.leave(four)
        events.append(await admission.enter(11))
        return events

    assert asyncio.run(scenario()) == [10, (6, 0), None]


class TurnOne:
    def propose(self, success: Any, failures: Any, rules: Any) -> Proposal:
        return Proposal(segment=Segment(trajectory_id=success.id, start=1, end=1), rationale="turn 1")


@pytest.mark.parametrize(("share", "cap", "verified"), [(0.69, 13, True), (0.64, 12, False)])
def test_the_budget_step_verifies_a_group_whose_expected_cost_is_the_cap_and_not_under_one_less(
    share: float, cap: int, verified: bool
) -> None:
    """One group: a 4-turn success, three 5-turn failures (19 rollout turns); segment [1, 1], K = 2. Expected cost:
    2 x (mean of 3, 4, 4, 4 turns left from s_1 + mean of 2, 3, 3, 3 from s_2) = 2 x (3.75 + 2.75) = 13.
    floor(0.69 x 19) = 13: it fits and its 4 continuations run (3 turns reserved each, 1 used). floor(0.64 x 19) =
    12: the plan leaves it unverified, no continuation runs."""
    batch = [make_trajectory("w", "g", True, list("abcd"))] + [
        make_trajectory(f"f{i}", "g", False, list("abcde")) for i in range(3)
    ]
    assert expected_cost([4, 5, 5, 5], 1, 1, 2) == 13
    calls: list[int] = []

    def hook(trajectory: Any, turn: int, seed: int) -> Outcome:
        calls.append(turn)
        return Outcome(success=turn > 1, turns=1)

    config = ProverConfig(k=2, curtail=False, max_extra_share=share, max_continuation_turns=3, budget_plan="batch")
    r = compute_bonus(batch, judge=TurnOne(), continue_from=hook, config=config)
    (g,) = r.report.groups
    assert r.report.metrics()["prover/turn_budget"] == cap
    if verified:
        assert g.status != "unverified" and g.verification is not None and sorted(calls) == [1, 1, 2, 2]
    else:
        assert g.status == "unverified" and calls == []
        assert g.reason.startswith("budget plan (batch): expected cost 13 turns does not fit the cap of 12 ")
