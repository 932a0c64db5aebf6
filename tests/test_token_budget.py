"""``ProverConfig.max_extra_token_share``: the cap on verification's cost in policy tokens, continuations in flight
included (the edge-driving tests of the turn cap, ``tests/test_budget.py``, repeated for tokens)."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from prover_core import (
    DivergenceJudge,
    InvalidBatchError,
    LocalExecutor,
    Proposal,
    ProtocolError,
    ProverConfig,
    Segment,
    Step,
    TokenPolicy,
    Trajectory,
    Turn,
    compute_bonus,
    merge_reports,
)
from prover_core.budget import TurnBudget
from prover_core.continuations import hook_continuer, make_continuer
from prover_core.demo import VaultBatchPolicy, vault_policy
from prover_core.errors import BudgetExhaustedError
from prover_core.report import Report
from prover_core.runner import Runner
from prover_core.verify import continuation_seeds
from tests.conftest import make_trajectory
from tests.verify_support import BATCH, make_restorable_env, same_bonus

ROLLOUT_TOKENS = 539 * 2 + 121
"""The vault batch's action tokens by hand: 539 two-word actions ("go east", "look around", ...) of 2 tokens and 121
``wait`` of 1 (660 turns): the token cap's denominator, not the turns'."""
SHARES = (*(i / 200 for i in range(101)), 1.0)
"""0 to 50% in steps of 0.5%, and 100%."""


class TokenVault:
    """The vault policy reporting its tokens: each action generates 1 or 2 tokens (``1 + (seed + turn) % 2``), at
    most 2; every token generated is counted here (what verification really spent)."""

    MOST = 2

    def __init__(self) -> None:
        self.inner, self.generated, self.calls = vault_policy(), 0, 0
        self.lock = threading.Lock()

    @staticmethod
    def tokens(context: Any) -> int:
        return 1 + (context.seed + len(context.history)) % 2

    def _generate(self, context: Any) -> Any:
        with self.lock:
            self.generated += self.tokens(context)
            self.calls += 1
        return self.inner.act(context)

    async def act(self, context: Any) -> Any:
        await asyncio.sleep(0)  # every continuation in flight at once: the cap is hit mid-verification
        return self._generate(context)

    def max_action_tokens(self, context: Any) -> int:
        return self.MOST

    def action_tokens(self, context: Any) -> int:
        return self.tokens(context)


class ThreadedTokenVault(TokenVault):
    """:class:`TokenVault` with a blocking ``act``: under ``continuation_timeout_s`` each call runs in a thread of its
    own, so continuations take and give back tokens concurrently; counts the calls in flight at once."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = self.most_in_flight = 0

    def act(self, context: Any) -> Any:  # type: ignore[override]
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.0005)
        try:
            return self._generate(context)
        finally:
            with self.lock:
                self.in_flight -= 1


def capped(share: float | None, policy: Any, **config: Any) -> Any:
    return compute_bonus(
        BATCH,
        judge=DivergenceJudge(),
        env=make_restorable_env(),
        policy=policy,
        config=ProverConfig(max_extra_token_share=share, **{"budget_plan": "off", **config}),
    )


def test_the_rollout_tokens_are_the_token_spans_and_the_cap_their_floored_share() -> None:
    r = capped(0.1, TokenVault())
    assert r.report.rollout_tokens == ROLLOUT_TOKENS == 1199 and r.report.rollout_turns == 660
    assert r.report.token_budget == 119  # floor(0.1 x 1199), not 0.1 x 660 turns
    assert r.report.metrics()["prover/token_budget"] == 119


@pytest.mark.parametrize(
    "schedule",
    [{"curtail": False}, {"curtail_mode": "overlap"}, {"curtail_mode": "wait"}],
)
def test_the_policy_tokens_generated_never_exceed_the_cap(schedule: dict[str, Any]) -> None:
    """Every cap from 0 to 50% of the rollout's tokens in steps of 0.5% (and 100%), every continuation of a round in
    flight at once: the tokens generated never exceed the cap and are each counted once; a group the cap cut short is
    decided only as the uncapped run decides it, else skipped (``budget``) with GRPO credit; a call the cap stopped
    nothing in is the uncapped call."""
    full = TokenVault()
    uncapped = capped(None, full, **schedule)
    status = {g.group_id: g.status for g in uncapped.report.groups}
    hit_mid_flight = decided_by_budget = skipped_by_budget = untouched = 0
    for share in SHARES:
        policy = TokenVault()
        r = capped(share, policy, **schedule)
        cap = math.floor(share * ROLLOUT_TOKENS)
        m = r.report.metrics()
        assert r.report.token_budget == m["prover/token_budget"] == cap
        assert policy.generated <= cap, share
        assert m["prover/policy_tokens"] == policy.generated  # every token generated, counted once
        assert m["prover/extra_token_share"] == pytest.approx(policy.generated / ROLLOUT_TOKENS)
        assert m["prover/extra_turn_share"] == pytest.approx(policy.calls / 660)  # the turn figure as before
        assert r.advantages == uncapped.advantages
        hit_mid_flight += m["prover/budget_wasted_tokens"] > 0
        for g in r.report.groups:
            stats = g.verify_stats
            if stats is None or not stats.failures.get("budget"):
                continue
            if g.status in ("accepted", "rejected"):  # decided: only where the outcomes in settled it
                decided_by_budget += 1
                assert g.status == status[g.group_id] and g.reason.startswith("budget: the token budget"), g.reason
            else:
                skipped_by_budget += 1
                assert g.status == "skipped" and "budget" in g.reason and "token" in g.reason, g.reason
                assert g.trajectory_id is not None and not r.turn_bonus[g.trajectory_id].any()  # GRPO credit
        assert m["prover/groups_skipped_budget"] == sum(
            g.status == "skipped" and "budget" in g.reason for g in r.report.groups
        )
        cut = [(g.status, s) for g in r.report.groups if (s := g.verify_stats) and s.failures.get("budget")]
        undecided = sum(stats.policy_tokens for status, stats in cut if status == "skipped")
        stopped = sum(stats.budget_tokens for status, stats in cut if status != "skipped")
        assert m["prover/budget_wasted_tokens"] == undecided + stopped
        if m["prover/continuations_failed/budget"] == 0:  # the cap stopped nothing: the uncapped result
            untouched += 1
            same_bonus(r, uncapped)
            assert policy.generated == full.generated
    assert hit_mid_flight and decided_by_budget and skipped_by_budget and untouched


def test_continuations_in_threads_never_generate_past_the_cap() -> None:
    """The policy blocks in threads of its own (``continuation_timeout_s``), many at once: tokens are reserved before
    each action and given back after it under a lock, so the tokens generated still never exceed the cap."""
    concurrent = 0
    for share in (0.0, 0.02, 0.05, 0.1, 0.2, 0.3):
        policy = ThreadedTokenVault()
        r = capped(share, policy, continuation_timeout_s=60.0)
        cap = math.floor(share * ROLLOUT_TOKENS)
        assert policy.generated <= cap and r.report.metrics()["prover/policy_tokens"] == policy.generated
        concurrent += policy.most_in_flight > 1
    assert concurrent  # the actions did overlap in threads


@pytest.mark.parametrize("share", [0.05, 0.1, 0.2, 0.3])
def test_with_both_caps_each_holds(share: float) -> None:
    """``max_extra_share`` and ``max_extra_token_share`` together (the plan on): neither is exceeded."""
    policy = TokenVault()
    r = capped(share, policy, max_extra_share=share / 2, budget_plan="batch")
    m = r.report.metrics()
    assert policy.generated <= math.floor(share * ROLLOUT_TOKENS) and m["prover/policy_tokens"] == policy.generated
    assert policy.calls <= math.floor(share / 2 * 660) and m["prover/policy_turns"] == policy.calls


# --- by hand: one group, four one-action continuations -------------------------------------------------------


class _Episode:
    def __init__(self, success: bool) -> None:
        self.last, self.success = Step(observation="s"), success

    def step(self, action: Any) -> Step:
        return Step(observation="end", done=True, success=self.success)


class OneAction:
    """Every continuation ends after one action: a success from the post boundary (turn 2), from the pre boundary
    (turn 1) only for the seed ``lucky``."""

    def __init__(self, lucky: int | None) -> None:
        self.lucky = lucky

    def restore(self, trajectory: Trajectory, turn: int, seed: int) -> _Episode:
        return _Episode(turn >= 2 or seed == self.lucky)


class TwoOfThree:
    """Each action reserves 3 tokens and generates 2."""

    def __init__(self) -> None:
        self.generated = 0

    async def act(self, context: Any) -> str:
        self.generated += 2
        await asyncio.sleep(0)  # all four continuations reserve before any gives back
        return "a"

    def max_action_tokens(self, context: Any) -> int:
        return 3

    def action_tokens(self, context: Any) -> int:
        return 2


class TurnOne:
    def propose(self, success: Any, failures: Any, rules: Any) -> Proposal:
        return Proposal(segment=Segment(trajectory_id=success.id, start=1, end=1), rationale="turn 1")


GROUP = [make_trajectory("w", "g", True, list("abcd"))] + [
    make_trajectory(f"f{i}", "g", False, list("abcde")) for i in range(3)
]
"""19 turns of 2 tokens each: 38 rollout tokens."""
CONFIG = ProverConfig(k=2, curtail=False)


def by_hand(share: float, lucky: bool) -> tuple[Any, TwoOfThree]:
    seeds, _ = continuation_seeds(CONFIG.stages.verify, GROUP[0])
    policy = TwoOfThree()
    r = compute_bonus(
        GROUP,
        judge=TurnOne(),
        env=OneAction(seeds[0] if lucky else None),
        policy=policy,
        config=CONFIG.model_copy(update={"max_extra_token_share": share}),
    )
    return r, policy


def test_a_cut_group_the_outcomes_do_not_settle_is_skipped_with_grpo_credit_by_hand() -> None:
    """Cap floor(0.3 x 38) = 11 tokens. The four continuations (pre, pre, post, post) each reserve 3 before acting:
    9 reserved, 2 left, so the fourth (post) is stopped before its action. Pre 1/2 (the lucky seed), post 1/1: the
    stopped one could make post 1/2 (Delta 0, rejected) or 2/2 (accepted), so the group is skipped (``budget``) and
    keeps GRPO credit. 3 actions of 2 tokens: 6 generated, each unused token given back (cap 11, not 9, left 5)."""
    r, policy = by_hand(0.3, lucky=True)
    (g,) = r.report.groups
    m = r.report.metrics()
    assert m["prover/token_budget"] == 11 and policy.generated == m["prover/policy_tokens"] == 6
    assert m["prover/extra_token_share"] == 6 / 38 and m["prover/policy_turns"] == 3
    assert g.status == "skipped" and g.reason == (
        "budget: the token budget stopped 0 pre and 1 post continuations, and the outcomes in (pre 1/2, post 1/1) "
        "do not settle it"
    )
    assert g.verify_stats is not None and g.verify_stats.failures == {"budget": 1}
    assert g.verify_stats.budget_tokens == 0 and g.verify_stats.policy_tokens == 6
    assert m["prover/budget_wasted_tokens"] == 6 and m["prover/groups_skipped_budget"] == 1
    assert r.advantages == {"w": 0.75, "f0": -0.25, "f1": -0.25, "f2": -0.25}
    assert not any(b.any() for b in r.turn_bonus.values())


def test_a_cut_group_the_outcomes_settle_is_decided_by_hand() -> None:
    """The same cap, no lucky seed: pre 0/2, post 1/1, one post stopped. Post 1/2 or 2/2 both beat pre 0/2, so the
    group is accepted with ``Delta = 1/1 - 0/2 = 1`` on turn 1."""
    r, _ = by_hand(0.3, lucky=False)
    (g,) = r.report.groups
    assert g.status == "accepted" and g.reason.startswith("budget: the token budget stopped 0 pre and 1 post")
    assert g.verification is not None and (g.verification.post_count, g.verification.pre_count) == (1, 2)
    np.testing.assert_array_equal(r.turn_bonus["w"], [0.0, 1.0, 0.0, 0.0])
    assert r.report.metrics()["prover/budget_wasted_tokens"] == 0  # the stopped one generated nothing


def test_one_token_more_lets_every_continuation_run_by_hand() -> None:
    """Cap floor(0.32 x 38) = 12: four reservations of 3 fit, nothing is stopped, 8 tokens generated (a cap of 0.32 x
    19 turns = 6 would have let two run; a rounded-up 0.3 x 38 = 12 would not have stopped the fourth above)."""
    r, policy = by_hand(0.32, lucky=True)
    (g,) = r.report.groups
    m = r.report.metrics()
    assert m["prover/token_budget"] == 12 and policy.generated == m["prover/policy_tokens"] == 8
    assert g.status == "accepted" and not g.reason.startswith("budget")  # pre 1/2, post 2/2
    assert m["prover/continuations_failed/budget"] == 0 and m["prover/budget_wasted_tokens"] == 0


class TwoOfThreeInTurn(TwoOfThree):
    """:class:`TwoOfThree` without yielding: each continuation reserves, acts and gives back before the next starts."""

    async def act(self, context: Any) -> str:
        self.generated += 2
        return "a"


@pytest.mark.parametrize(("share", "cap", "ran"), [(0.22, 8, 3), (0.24, 9, 4)])
def test_the_unused_part_of_each_reservation_goes_back_by_hand(share: float, cap: int, ran: int) -> None:
    """One continuation after the other, each reserving 3 and generating 2: after three, 3 x 2 = 6 are spent. Cap 9
    (floor(0.24 x 38)): 3 left, the fourth runs (8 in all; without giving back it would find 0). Cap 8: 2 left cannot
    cover a reservation of 3, so the fourth is stopped although its 2 tokens would have fit (strict)."""
    seeds, _ = continuation_seeds(CONFIG.stages.verify, GROUP[0])
    policy = TwoOfThreeInTurn()
    config = CONFIG.model_copy(update={"max_extra_token_share": share})
    r = compute_bonus(GROUP, judge=TurnOne(), env=OneAction(seeds[0]), policy=policy, config=config)
    m = r.report.metrics()
    assert m["prover/token_budget"] == cap and policy.generated == m["prover/policy_tokens"] == 2 * ran
    assert m["prover/continuations_failed/budget"] == 4 - ran


def test_an_action_the_tokens_left_cannot_cover_is_not_taken_and_gives_back_its_turn() -> None:
    """A token budget of 2 for an action that may take 3: stopped before it acts (no call, no token), and the turn it
    took from the turn budget goes back."""
    config = ProverConfig()
    policy = TwoOfThree()
    continuer = make_continuer(OneAction(None), policy, max_turns=5, count_tokens=True)
    turns, tokens = TurnBudget(10), TurnBudget(2)
    runner = Runner(GROUP[0], continuer, config.stages.verify, asyncio.Semaphore(1), budget=turns, tokens=tokens)
    result = asyncio.run(runner.one(1, 0))
    assert isinstance(result, BudgetExhaustedError) and "policy tokens" in str(result)
    assert policy.generated == 0 and turns.used == 0 and tokens.used == 0 and runner.budget_stopped == 1


# --- what cannot be capped in tokens: refused, never silently uncapped ----------------------------------------


class Recording:
    """A judge that records whether it was asked."""

    def __init__(self) -> None:
        self.asked = 0

    def propose(self, success: Any, failures: Any, rules: Any) -> Proposal:
        self.asked += 1
        return Proposal(segment=Segment(trajectory_id=success.id, start=1, end=1))


@pytest.mark.parametrize(
    "policy",
    [vault_policy(), VaultBatchPolicy(), lambda context: "wait"],
    ids=["policy-without-tokens", "batch-policy", "function"],
)
def test_a_policy_that_does_not_report_its_tokens_is_refused_before_anything_runs(policy: Any) -> None:
    judge = Recording()
    with pytest.raises(ProtocolError, match=r"max_extra_token_share .* needs env and a policy that reports them"):
        compute_bonus(
            BATCH, judge=judge, env=make_restorable_env(), policy=policy, config=ProverConfig(max_extra_token_share=0.1)
        )
    assert judge.asked == 0


def test_a_hook_or_an_executor_is_refused_under_a_token_cap() -> None:
    config = ProverConfig(max_extra_token_share=0.1)
    with pytest.raises(ProtocolError, match="a continue_from hook runs its continuations' tokens out of sight"):
        compute_bonus(BATCH, judge=DivergenceJudge(), continue_from=lambda t, turn, seed: True, config=config)
    executor = LocalExecutor(make_restorable_env(), TokenVault())
    with pytest.raises(ProtocolError, match="an executor"):
        compute_bonus(BATCH, judge=DivergenceJudge(), executor=executor, config=config)
    with pytest.raises(ProtocolError, match="a token budget"):  # verification called directly, a hook's continuer
        Runner(
            GROUP[0],
            hook_continuer(lambda t, turn, seed: True),
            config.stages.verify,
            asyncio.Semaphore(1),
            tokens=TurnBudget(5),
        )


def test_a_batch_without_token_spans_is_refused_under_a_token_cap() -> None:
    """The rollout's tokens are unknown where a turn has no span: refused (naming it), not capped at a wrong size;
    without a token cap the batch is fine."""
    bare = [
        t.model_copy(update={"turns": tuple(Turn(observation=u.observation, action=u.action) for u in t.turns)})
        if t.id == BATCH[3].id
        else t
        for t in BATCH
    ]
    judge = Recording()
    with pytest.raises(InvalidBatchError, match=f"{BATCH[3].num_turns} turns of the batch have no token_span .* turn "
                       f"0 of trajectory '{BATCH[3].id}'"):  # fmt: skip
        compute_bonus(bare, judge=judge, env=make_restorable_env(), policy=TokenVault(),
                      config=ProverConfig(max_extra_token_share=0.5))  # fmt: skip
    assert judge.asked == 0
    r = compute_bonus(bare, judge=DivergenceJudge(), env=make_restorable_env(), policy=TokenVault())
    assert r.report.token_budget is None and "prover/token_budget" not in r.report.metrics()
    assert r.report.rollout_tokens == ROLLOUT_TOKENS - sum(
        span[1] - span[0] for u in BATCH[3].turns if (span := u.token_span)
    )


@pytest.mark.parametrize("share", [1.0000001, 2.0, 10, 30.0])
def test_a_token_share_above_one_is_refused_as_a_likely_percent(share: float) -> None:
    percent = f"max_extra_token_share={share} is a share of the rollout's policy tokens .* write {share / 100:g} for"
    with pytest.raises(ValidationError, match=percent):
        ProverConfig(max_extra_token_share=share)
    with pytest.raises(ValidationError):
        ProverConfig(max_extra_token_share=-0.1)
    assert ProverConfig(max_extra_token_share=1.0).max_extra_token_share == 1.0
    assert ProverConfig(max_extra_token_share=0.0).max_extra_token_share == 0.0


class Overspends(TwoOfThree):
    def action_tokens(self, context: Any) -> int:
        return 4  # more than the 3 it reserved


class Miscounts(TwoOfThree):
    def action_tokens(self, context: Any) -> Any:
        return 2.0


def test_a_policy_reporting_more_than_it_reserved_fails_its_continuation_and_a_non_count_is_raised() -> None:
    """Reporting 4 tokens for an action that reserved 3 breaks the cap's premise: that continuation is counted as
    failed (``turn_limit``), never decided on; a count that is not an int is a programming error, raised."""
    config = CONFIG.model_copy(update={"max_extra_token_share": 1.0})
    r = compute_bonus(GROUP, judge=TurnOne(), env=OneAction(None), policy=Overspends(), config=config)
    (g,) = r.report.groups
    assert g.status == "skipped" and g.verify_stats is not None and g.verify_stats.failures == {"turn_limit": 4}
    assert "more than the 3 of its max_action_tokens" in g.reason
    with pytest.raises(ProtocolError, match=r"Miscounts.action_tokens\(context\) must return a non-negative int"):
        compute_bonus(GROUP, judge=TurnOne(), env=OneAction(None), policy=Miscounts(), config=config)


def test_the_token_caps_of_a_steps_parts_add_up() -> None:
    merged = merge_reports(
        [Report(rollout_tokens=40, token_budget=4), Report(rollout_tokens=30, token_budget=3), Report()]
    )
    assert merged.rollout_tokens == 70 and merged.token_budget == 7
    assert merge_reports([Report(), Report()]).token_budget is None


# --- the engine policy reports its tokens ----------------------------------------------------------------------


class VaryingEngine:
    """A token engine generating ``1 + seed % 3`` ids (the first: 51, ``take``, for an odd seed, else 50)."""

    def __init__(self) -> None:
        self.generated = 0

    async def generate(self, prompt_ids: list[int], params: Any) -> Any:
        from prover_engine import Generation

        ids = (50 + params.seed % 2,) + (7,) * (params.seed % 3)
        self.generated += len(ids)
        await asyncio.sleep(0)
        return Generation(token_ids=ids)


@pytest.mark.parametrize("share", [0.0, 0.1, 0.2, 0.4, 1.0])
def test_the_engine_policy_is_held_to_the_token_cap(share: float) -> None:
    """``EnginePolicy`` reserves its ``max_tokens`` (3) per action and reports the ids the engine generated: the
    engine's own count of generated ids never exceeds the cap and is the report's ``policy_tokens``."""
    from prover_engine import EnginePolicy, SamplingParams
    from tests.engine_support import FixedJudge, KeyEnv, key_group, parse, render, store_of

    rows = key_group("g", successes=2) + key_group("h", successes=0)
    engine = VaryingEngine()
    policy = EnginePolicy(
        engine, store_of(rows), render_observation=render, parse_action=parse, sampling=SamplingParams(max_tokens=3)
    )
    assert isinstance(policy, TokenPolicy)
    from prover_core import ReplayEnv

    r = compute_bonus(
        [t for t, _, _ in rows],
        judge=FixedJudge(1, 1),
        env=ReplayEnv(lambda: KeyEnv(horizon=4)),
        policy=policy,
        config=ProverConfig(k=4, max_extra_token_share=share),
    )
    m = r.report.metrics()
    assert r.report.rollout_tokens == 64  # 16 runs of 4 one-token actions
    assert m["prover/token_budget"] == math.floor(share * 64)
    assert engine.generated == policy.stats.generated_tokens == m["prover/policy_tokens"] <= math.floor(share * 64)
    if share == 1.0:
        assert m["prover/continuations_failed/budget"] == 0 and engine.generated > 0
