"""``ProverConfig.max_extra_share``: a hard cap on verification's policy turns, continuations in flight included."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from prover_core import BudgetExhaustedError, DivergenceJudge, Outcome, ProverConfig, compute_bonus
from prover_core.acceptance import AcceptanceRule
from prover_core.budget import TurnBudget, expected_cost, plan, settled_by
from prover_core.demo import vault_policy
from tests.verify_support import BATCH, make_restorable_env, plain, same_bonus

ROLLOUT_TURNS = sum(t.num_turns for t in BATCH)
SHARES = (*(i / 100 for i in range(51)), 1.0)


class CountingPolicy:
    """The vault policy, counting every policy call (the turns verification really spent)."""

    def __init__(self) -> None:
        self.inner, self.calls = vault_policy(), 0

    async def act(self, context: Any) -> Any:
        self.calls += 1
        await asyncio.sleep(0)  # every continuation in flight at once: the cap is hit mid-verification
        return self.inner.act(context)


def capped(share: float | None, policy: Any = None, **config: Any) -> Any:
    return compute_bonus(
        BATCH,
        judge=DivergenceJudge(),
        env=make_restorable_env(),
        policy=policy or vault_policy(),
        config=ProverConfig(max_extra_share=share, **{"budget_plan": "off", **config}),
    )


@pytest.mark.parametrize(
    "schedule",
    [{"curtail": False}, {"curtail_mode": "overlap"}, {"curtail_mode": "wait"}],
)
def test_the_policy_turns_spent_never_exceed_the_cap(schedule: dict[str, Any]) -> None:
    """Every cap from 0 to 50% of the rollout's turns, every continuation of a round in flight at once: the policy
    calls made never exceed the cap; a group the cap cut short is decided only as the uncapped run decides it."""
    uncapped = plain(ProverConfig(**schedule))
    full = uncapped.report.metrics()["prover/policy_turns"]
    status = {g.group_id: g.status for g in uncapped.report.groups}
    hit_mid_flight = decided_by_budget = 0
    for share in SHARES:
        policy = CountingPolicy()
        r = capped(share, policy, **schedule)
        cap = int(share * ROLLOUT_TURNS)
        m = r.report.metrics()
        assert r.report.turn_budget == m["prover/turn_budget"] == cap
        assert policy.calls <= cap and m["prover/policy_turns"] <= cap, share
        hit_mid_flight += m["prover/budget_wasted_turns"] > 0
        for g in r.report.groups:
            stats = g.verify_stats
            if stats is None or not stats.failures.get("budget"):
                continue
            if g.status in ("accepted", "rejected"):  # decided: only where the outcomes in settled it
                decided_by_budget += 1
                assert g.status == status[g.group_id] and g.reason.startswith("budget"), g.reason
            else:
                assert g.status == "skipped" and "budget" in g.reason
        assert m["prover/groups_skipped_budget"] == sum(
            g.status == "skipped" and "budget" in g.reason for g in r.report.groups
        )
        # wasted: every turn of a cut group left undecided, the stopped continuations' turns of a cut group decided
        cut = [g for g in r.report.groups if g.verify_stats is not None and g.verify_stats.failures.get("budget")]
        undecided = sum(g.verification.policy_turns for g in cut if g.status == "skipped" and g.verification)
        stopped = sum(g.verify_stats.budget_turns for g in cut if g.status != "skipped" and g.verify_stats)
        assert m["prover/budget_wasted_turns"] == undecided + stopped
        assert all(g.verification is None or g.verify_stats is None or g.verify_stats.budget_turns
                   <= g.verification.policy_turns for g in cut)  # fmt: skip
        if cap >= full:  # room for everything: the uncapped result
            same_bonus(r, uncapped)
    assert hit_mid_flight and decided_by_budget  # the edge was reached, with continuations in flight, and decided


def test_hooks_reserve_their_turn_limit_before_starting_and_give_back_the_rest() -> None:
    """A ``continue_from`` hook reports its turns at its end: each reserves ``max_continuation_turns`` (6) first;
    the turns reported in all never exceed the cap, and no hook starts without 6 turns left."""
    for share in SHARES:
        cap = int(share * ROLLOUT_TURNS)
        reported: list[int] = []

        async def hook(trajectory: Any, turn: int, seed: int, reported: list[int] = reported) -> Outcome:
            await asyncio.sleep(0)
            reported.append(1 + seed % 5)
            return Outcome(success=turn >= 3 and seed % 3 > 0, turns=reported[-1])

        r = compute_bonus(
            BATCH,
            judge=DivergenceJudge(),
            continue_from=hook,
            config=ProverConfig(max_extra_share=share, max_continuation_turns=6),
        )
        assert sum(reported) <= cap and r.report.metrics()["prover/policy_turns"] <= cap
        if cap < 6:
            assert not reported


def test_a_hook_reporting_more_than_its_turn_limit_is_a_failed_continuation() -> None:
    r = compute_bonus(
        BATCH,
        judge=DivergenceJudge(),
        continue_from=lambda trajectory, turn, seed: Outcome(success=True, turns=7),
        config=ProverConfig(max_extra_share=1.0, max_continuation_turns=6),
    )
    failed = sum(g.verify_stats.failures.get("turn_limit", 0) for g in r.report.groups if g.verify_stats)
    assert failed > 0 and r.report.metrics()["prover/policy_turns"] == 0


def test_the_turn_budget_takes_and_gives_back() -> None:
    budget = TurnBudget(3)
    assert budget.take(2) and not budget.take(2) and budget.take(1) and budget.left == 0
    budget.give_back(2)
    assert budget.left == 2 and budget.peak == 3
    with pytest.raises(ValueError):
        TurnBudget(-1)


def test_settled_by_tries_every_outcome_of_the_stopped_continuations() -> None:
    rule = AcceptanceRule("delta_positive")
    # pre 0/2 in, post 3/3 in, 1 post and 2 pre stopped (K = 4): worst case pre 2/4 < post 3/4: accepted whatever
    ok = settled_by(rule, 4, (0, 2), (3, 3), (2, 1))
    assert ok is not None and ok[0]
    # pre 1/3, post 2/3, one stopped at each: pre 2/4 vs post 2/4 rejects, pre 1/4 vs post 3/4 accepts: open
    assert settled_by(rule, 4, (1, 3), (2, 3), (1, 1)) is None
    # post 0/4 finished: rejected whatever the stopped pre ones give
    no = settled_by(rule, 4, (0, 1), (0, 4), (3, 0))
    assert no is not None and not no[0]
    nothing_in = settled_by(rule, 4, (0, 0), (0, 4), (4, 0))  # pre not measured: post 0/4 rejects whatever
    assert nothing_in is not None and not nothing_in[0]
    # negative credit: the roles swapped
    drop = settled_by(rule, 4, (3, 3), (0, 2), (1, 2), "drop")
    assert drop is not None and drop[0]


def test_budget_stops_are_their_own_failure_kind() -> None:
    from prover_core.continuations import failure_kind

    assert failure_kind(BudgetExhaustedError("spent")) == "budget"


def test_expected_cost_is_k_continuations_as_long_as_the_recorded_runs_had_left() -> None:
    # runs of 5 and 7 turns, segment [1, 2]: from s_1 4 and 6 turns left (mean 5), from s_3 2 and 4 (mean 3)
    assert expected_cost([5, 7], 1, 2, 4) == 4 * (5 + 3)
    assert expected_cost([3], 2, 2, 2) == 2 * (1 + 1)  # at least one turn from each boundary


def test_the_plan_keeps_groups_by_score_while_their_cost_fits() -> None:
    assert plan([10, 5, 8], [1, 3, 2], 14) == [False, True, True]
    assert plan([10, 5, 8], [1, 3, 2], 12) == [False, True, False]
    assert plan([10, 5, 8], [1, 3, 2], 3) == [False, False, False]
    assert plan([4, 4], [0, 0], 8) == [True, True]  # ties keep the given order


@pytest.mark.parametrize("rule", ["batch", "random", "planner"])
def test_a_planned_cap_verifies_what_fits_and_leaves_the_rest_unverified(rule: str) -> None:
    left_out = verified = 0
    for share in SHARES:
        policy = CountingPolicy()
        r = capped(share, policy, budget_plan=rule)
        cap = int(share * ROLLOUT_TURNS)
        assert policy.calls <= cap and r.report.metrics()["prover/policy_turns"] <= cap
        planned = [g for g in r.report.groups if g.status == "unverified"]
        # left out by the plan, or planned and never admitted (what was left could not cover its reservation)
        assert all(
            g.proposal is not None
            and (f"budget plan ({rule})" in g.reason or g.reason.startswith("budget: not started"))
            for g in planned
        )
        costs = [
            expected_cost([t.num_turns for t in BATCH if t.group_id == g.group_id], s.start, s.end, 4)
            for g in r.report.groups
            if g.verification is not None and g.proposal is not None
            for s in [g.proposal.segment]
        ]
        assert sum(costs) <= cap
        left_out, verified = left_out + len(planned), verified + len(costs)
    assert left_out and verified


@pytest.mark.parametrize("share", [1.0000001, 2.0, 10, 30.0])
def test_a_share_above_one_is_refused_as_a_likely_percent(share: float) -> None:
    """``max_extra_share=10`` meant "10%": above 1 the cap would allow more verification turns than the rollout
    itself, i.e. no cap at all, so it is refused with the value the user likely meant; 1 itself is a cap."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=f"write {share / 100:g} for"):
        ProverConfig(max_extra_share=share)
    assert ProverConfig(max_extra_share=1.0).max_extra_share == 1.0
    assert ProverConfig(max_extra_share=0.0).max_extra_share == 0.0


def test_every_turn_of_a_group_the_cap_left_undecided_is_wasted_by_hand() -> None:
    """One group (a 4-turn success, three 5-turn failures: 19 rollout turns), segment [1, 1], K = 2, no curtailment,
    each continuation 3 turns (its reserved limit). A cap of floor(0.48 x 19) = 9 turns lets three continuations
    run: the two from before turn 1 (one success, one failure) and one from after it (a success); the fourth cannot
    reserve its 3 turns. Post 1/1 against pre 1/2 is not settled (the missing one could make post 1/2), so the group
    is skipped, and all 9 turns it spent bought nothing: ``budget_wasted_turns`` = 9 (counting only the stopped
    continuations' turns, as before, gave 0: none was stopped mid-way)."""
    from tests.conftest import make_trajectory

    batch = [make_trajectory("w", "g", True, list("abcd"))] + [
        make_trajectory(f"f{i}", "g", False, list("abcde")) for i in range(3)
    ]
    pre_calls: list[int] = []

    def hook(trajectory: Any, turn: int, seed: int) -> Outcome:
        if turn <= 1:
            pre_calls.append(seed)
            return Outcome(success=len(pre_calls) == 1, turns=3)
        return Outcome(success=True, turns=3)

    class TurnOne:
        def propose(self, success: Any, failures: Any, rules: Any) -> Any:
            from prover_core import Proposal, Segment

            return Proposal(segment=Segment(trajectory_id=success.id, start=1, end=1), rationale="turn 1")

    r = compute_bonus(
        batch,
        judge=TurnOne(),
        continue_from=hook,
        config=ProverConfig(k=2, curtail=False, max_extra_share=0.48, max_continuation_turns=3, budget_plan="off"),
    )
    (g,) = r.report.groups
    m = r.report.metrics()
    assert m["prover/turn_budget"] == 9 and m["prover/policy_turns"] == 9
    assert g.status == "skipped" and "budget" in g.reason and g.verify_stats is not None
    assert g.verify_stats.failures.get("budget") == 1 and g.verify_stats.budget_turns == 0
    assert m["prover/budget_wasted_turns"] == 9 and m["prover/groups_skipped_budget"] == 1


def test_a_groups_share_spends_its_own_part_then_the_pools_and_gives_back_the_rest() -> None:
    """By hand: a pool of 10; A's share reserves 4, B's 4 (2 left in the pool). A takes 6 (its 4, then the pool's 2);
    a 7th is refused while B runs; B ends having used 3 of its 4, whose 1 goes back; A then takes it. Giving back
    returns the borrowed turns to the pool first. Never more than 10 taken in all."""
    from prover_core.budget import GroupShare

    pool = TurnBudget(10)
    a, b = GroupShare(pool, 4), GroupShare(pool, 4)
    assert pool.left == 2 and a.left == 4 + 2
    assert all(a.take() for _ in range(6)) and a.borrowed == 2 and pool.left == 0
    assert not a.take()
    assert all(b.take() for _ in range(3))
    b.release()
    assert pool.left == 1 and a.take() and pool.left == 0 and not a.take()
    a.give_back(2)  # a reservation's unused part: the borrowed turns go back to the pool first
    assert pool.left == 2 and a.borrowed == 1
    assert GroupShare(pool, 5).limit == 2  # a share never reserves more than the pool has left


@pytest.mark.parametrize("rule", ["batch", "planner"])
def test_a_planned_cap_with_shares_never_spends_past_the_cap(rule: str) -> None:
    """Every cap from 0 to 50%, the plan on (each verified group its own share of the budget): the policy calls made
    never exceed the cap."""
    for share in SHARES:
        policy = CountingPolicy()
        r = capped(share, policy, budget_plan=rule)
        cap = int(share * ROLLOUT_TURNS)
        assert policy.calls <= cap and r.report.metrics()["prover/policy_turns"] <= cap, share


def test_admission_starts_a_share_only_while_what_is_left_covers_it() -> None:
    """By hand: a pool of 10 turns, two verifications reserving 6 each. The first is admitted (4 left); the second
    waits; the first ends having used 3, giving back 3 (7 left), and the second is admitted (1 left). Once it ends
    unused (7 left), a third reserving 11 with nothing running is never started (``None``): nothing could make
    room."""
    from prover_core.budget import Admission

    async def scenario() -> list[object]:
        pool = TurnBudget(10)
        admission = Admission(pool)
        events: list[object] = []
        first = await admission.enter(6)
        assert first is not None and pool.left == 4

        async def second() -> None:
            share = await admission.enter(6)
            events.append(("second admitted", pool.left))
            assert share is not None
            await admission.leave(share)

        waiting = asyncio.create_task(second())
        await asyncio.sleep(0)
        events.append("second waits")
        assert all(first.take() for _ in range(3))
        await admission.leave(first)
        await waiting
        events.append(await admission.enter(11))
        return events

    assert asyncio.run(scenario()) == ["second waits", ("second admitted", 1), None]
