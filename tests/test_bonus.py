"""compute_bonus end to end: numbers, bad input, every failure path falls back to GRPO with a reason."""

import asyncio
import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest
from pydantic import ValidationError

from prover_core import (
    Decline,
    InvalidBatchError,
    InvalidSegmentError,
    JudgeError,
    Proposal,
    ProverConfig,
    ReplayEnv,
    Segment,
    SegmentRules,
    Trajectory,
    acompute_bonus,
    compute_bonus,
)
from prover_core.demo import MDPEnv, VaultMDP, vault_policy
from prover_core.demo.run import rollout_batch
from tests.conftest import make_trajectory


class FixedJudge:
    def __init__(self, start: int, end: int) -> None:
        self.start, self.end, self.calls = start, end, 0

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal:
        self.calls += 1
        return Proposal(segment=Segment(trajectory_id=success.id, start=self.start, end=self.end), rationale="fixed")


def step_continuer(threshold: int):  # type: ignore[no-untyped-def]
    """Succeeds from turn >= threshold, fails before: Delta = 1 for segments crossing it."""
    return lambda trajectory, turn, seed: turn >= threshold


def batch() -> list[Trajectory]:
    """Group g: 1/4 successes (eligible). Group h: 2/4 (not eligible: exactly half)."""
    g = [make_trajectory("g0", "g", True, list("abcd"))] + [
        make_trajectory(f"g{i}", "g", False, list("abxde")) for i in (1, 2, 3)
    ]
    h = [make_trajectory(f"h{i}", "h", i < 2, list("ab")) for i in range(4)]
    return g + h


def test_accepted_segment_gets_lambda_delta_and_nothing_else_changes() -> None:
    judge = FixedJudge(1, 2)
    r = compute_bonus(batch(), judge=judge, continue_from=step_continuer(3), config=ProverConfig(k=4, lam=0.5))
    assert judge.calls == 1  # group h never reaches the judge
    assert r.advantages == {
        "g0": 0.75,
        "g1": -0.25,
        "g2": -0.25,
        "g3": -0.25,
        "h0": 0.5,
        "h1": 0.5,
        "h2": -0.5,
        "h3": -0.5,
    }
    np.testing.assert_allclose(r.turn_bonus["g0"], [0, 0.5, 0.5, 0])  # lam * Delta = 0.5 * 1
    for tid in ("g1", "g2", "g3", "h0", "h1", "h2", "h3"):
        assert not r.turn_bonus[tid].any()
    np.testing.assert_allclose(r.turn_advantages("g0"), [0.75, 1.25, 1.25, 0.75])
    # token view: spans (3,5) (8,10) (13,15) (18,20); environment tokens get nothing
    want = np.zeros(21)
    want[3:5], want[8:10], want[13:15], want[18:20] = 0.75, 1.25, 1.25, 0.75
    np.testing.assert_allclose(r.token_advantages("g0", 21), want)
    np.testing.assert_allclose(r.bonus_matrix(["h0", "g0"], 21)[1], np.where((want == 1.25), 0.5, 0.0))
    assert not r.bonus_matrix(["h0", "g0"], 21)[0].any()
    m = r.report.metrics()
    assert m["prover/groups"] == 2 and m["prover/groups_eligible"] == 1 and m["prover/groups_accepted"] == 1
    assert m["prover/continuations"] == 8 and m["prover/mean_delta_accepted"] == 1.0
    assert m["prover/mean_segment_turns"] == 2 and m["prover/judge/propose_calls"] == 1
    assert r.report.summary() == {
        "not_eligible": 1,
        "unverified": 0,
        "declined": 0,
        "skipped": 0,
        "rejected": 0,
        "accepted": 1,
    }


def test_max_verified_groups_verifies_a_subset_and_leaves_the_rest_at_grpo() -> None:
    """Three eligible groups, a cap of 1: one judge call, one verification, two groups ``unverified`` with
    exactly GRPO's advantages; a cap of 0 verifies nothing; no cap (the paper) verifies all three."""
    three = [
        make_trajectory(f"{g}{i}", g, i == 0, list("abcd") if i == 0 else list("abxde"))
        for g in "xyz"
        for i in range(4)
    ]
    grpo = compute_bonus(three, judge=FixedJudge(1, 2), continue_from=step_continuer(3), config=ProverConfig(k=4))
    assert grpo.report.count("accepted") == 3
    for cap, verified in ((1, 1), (0, 0)):
        judge = FixedJudge(1, 2)
        r = compute_bonus(three, judge=judge, continue_from=step_continuer(3),
                          config=ProverConfig(k=4, max_verified_groups=cap))  # fmt: skip
        assert judge.calls == verified == r.report.count("accepted")
        unverified = [g for g in r.report.groups if g.status == "unverified"]
        assert len(unverified) == 3 - verified and all("max_verified_groups" in g.reason for g in unverified)
        m = r.report.metrics()
        assert m["prover/groups_unverified"] == 3 - verified and m["prover/continuations"] == 8 * verified
        assert m["prover/groups_eligible"] == 3 and m["prover/groups_skipped"] == 0
        assert r.advantages == grpo.advantages
        for g in unverified:
            for t in three:
                if t.group_id == g.group_id:
                    assert not r.turn_bonus[t.id].any()
                    np.testing.assert_array_equal(r.turn_advantages(t.id), np.full(t.num_turns, grpo.advantages[t.id]))


def test_rejected_and_declined_leave_grpo_untouched() -> None:
    r = compute_bonus(batch(), judge=FixedJudge(0, 0), continue_from=step_continuer(3))  # Delta 0
    assert r.report.groups[0].status == "rejected" and not r.turn_bonus["g0"].any()

    class Declines:
        def propose(self, success, failures, rules):  # type: ignore[no-untyped-def]
            return Decline(reason="nothing stands out")

    r = compute_bonus(batch(), judge=Declines(), continue_from=step_continuer(3))
    assert r.report.groups[0].status == "declined" and r.report.groups[0].reason == "nothing stands out"
    assert r.report.metrics()["prover/continuations"] == 0


class Raises:
    def propose(self, success, failures, rules):  # type: ignore[no-untyped-def]
        raise TimeoutError("judge timed out")


class Garbage:
    def propose(self, success, failures, rules):  # type: ignore[no-untyped-def]
        return "turns 2-3 look important"


@pytest.mark.parametrize(
    "judge, error, text",
    [
        (Raises(), JudgeError, "judge timed out"),
        (Garbage(), JudgeError, "not a Proposal"),
        (FixedJudge(1, 9), InvalidSegmentError, "out of range"),
        (FixedJudge(3, 3), InvalidSegmentError, "terminal"),
        (FixedJudge(0, 4), InvalidSegmentError, "out of range"),
    ],
)
def test_judge_failures_skip_the_group_or_raise_when_strict(judge, error, text) -> None:  # type: ignore[no-untyped-def]
    r = compute_bonus(batch(), judge=judge, continue_from=step_continuer(3))
    g = r.report.groups[0]
    assert g.status == "skipped" and g.stage == "propose" and text in g.reason and error.__name__ in g.reason
    assert not any(b.any() for b in r.turn_bonus.values())
    assert r.report.skips == [g]
    with pytest.raises(error, match=text):
        compute_bonus(batch(), judge=judge, continue_from=step_continuer(3), config=ProverConfig(strict=True))


def test_environment_and_policy_failures_skip_the_group() -> None:
    trajs = rollout_batch(VaultMDP(), 6, 8, seed=0)

    class BrokenPolicy:
        def act(self, context):  # type: ignore[no-untyped-def]
            raise RuntimeError("CUDA out of memory")

    class Divergent(MDPEnv):
        def step(self, action):  # type: ignore[no-untyped-def]
            step = super().step(action)  # a simulator whose text drifted since the rollout
            return dataclasses.replace(step, observation=step.observation + " The lights flicker.")

    from prover_core import DivergenceJudge

    cases = [
        (ReplayEnv(lambda: MDPEnv(VaultMDP())), BrokenPolicy(), "CUDA out of memory"),
        (ReplayEnv(lambda: Divergent(VaultMDP())), vault_policy(), "ReplayMismatchError"),
    ]
    for env, policy, text in cases:
        r = compute_bonus(trajs, judge=DivergenceJudge(), env=env, policy=policy)
        verified = [g for g in r.report.groups if g.verification is not None]
        assert verified, "some group must reach verification"
        for g in verified:
            assert g.status == "skipped" and g.stage == "verify" and text in g.reason
        assert not any(b.any() for b in r.turn_bonus.values())


def test_bad_batches_raise_typed_errors() -> None:
    with pytest.raises(InvalidBatchError, match="empty"):
        compute_bonus([], judge=FixedJudge(0, 0), continue_from=step_continuer(1))
    dup = [make_trajectory("a", "g", True, ["x"]), make_trajectory("a", "g", False, ["x"])]
    with pytest.raises(InvalidBatchError, match="duplicate"):
        compute_bonus(dup, judge=FixedJudge(0, 0), continue_from=step_continuer(1))
    raw = {"id": "a", "group_id": "g", "turns": [{"observation": "o", "action": "x"}], "success": 0.7}
    with pytest.raises(ValidationError, match="binary"):
        compute_bonus([raw], judge=FixedJudge(0, 0), continue_from=step_continuer(1))
    with pytest.raises(ValueError, match="env and policy"):
        compute_bonus(batch(), judge=FixedJudge(0, 0))
    with pytest.raises(ValueError, match="not both"):
        compute_bonus(batch(), judge=FixedJudge(0, 0), continue_from=step_continuer(1), policy=vault_policy())


def test_dict_input_and_std_normalisation() -> None:
    raw = [t.model_dump() for t in batch()]
    r = compute_bonus(
        raw, judge=FixedJudge(1, 2), continue_from=step_continuer(3), config=ProverConfig(normalize_std=True)
    )
    # group g: R = [1,0,0,0], std(ddof=1) = 0.5 -> A = [1.5, -0.5, -0.5, -0.5]
    assert r.advantages["g0"] == pytest.approx(1.5, rel=1e-5) and r.advantages["g1"] == pytest.approx(-0.5, rel=1e-5)
    np.testing.assert_allclose(r.turn_bonus["g0"], [0, 1, 1, 0])


def test_async_judge_and_policy_and_a_running_event_loop() -> None:
    class AsyncJudge(FixedJudge):
        async def propose(self, success, failures, rules):  # type: ignore[no-untyped-def, override]
            await asyncio.sleep(0)
            return super().propose(success, failures, rules)

    async def continue_from(trajectory, turn, seed):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0)
        return turn >= 3

    async def inside_a_loop() -> None:
        r = compute_bonus(batch(), judge=AsyncJudge(1, 2), continue_from=continue_from)  # sync API in a loop
        np.testing.assert_allclose(r.turn_bonus["g0"], [0, 1, 1, 0])
        r = await acompute_bonus(batch(), judge=AsyncJudge(1, 2), continue_from=continue_from)
        np.testing.assert_allclose(r.turn_bonus["g0"], [0, 1, 1, 0])

    asyncio.run(inside_a_loop())


def test_judge_stats_reach_the_metrics() -> None:
    class Counting(FixedJudge):
        def stats(self) -> dict[str, float]:
            return {"calls": float(self.calls), "prompt_tokens": 123.0}

    r = compute_bonus(batch(), judge=Counting(1, 2), continue_from=step_continuer(3))
    m = r.report.metrics()
    assert m["prover/judge/calls"] == 1 and m["prover/judge/prompt_tokens"] == 123


def test_vault_end_to_end_credits_the_key_and_counts_cost() -> None:
    from prover_core import DivergenceJudge, SnapshotEnv

    mdp = VaultMDP()
    trajs = rollout_batch(mdp, 12, 8, seed=2)
    r = compute_bonus(trajs, judge=DivergenceJudge(), env=SnapshotEnv(lambda: MDPEnv(mdp)), policy=vault_policy())
    accepted = [g for g in r.report.groups if g.status == "accepted"]
    assert accepted
    for g in accepted:
        assert g.proposal is not None and g.trajectory_id is not None and g.verification is not None
        seg = g.proposal.segment
        actions = [r.trajectories[g.trajectory_id].turns[t].action for t in range(seg.start, seg.end + 1)]
        assert "take key" in actions
        assert r.turn_bonus[g.trajectory_id][seg.start] == pytest.approx(g.verification.delta)
    m = r.report.metrics()
    assert m["prover/policy_turns"] > 0
    assert m["prover/extra_turn_share"] == pytest.approx(m["prover/policy_turns"] / sum(t.num_turns for t in trajs))
