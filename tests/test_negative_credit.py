"""Optional negative credit: off by default; on, the longest failed run of a mostly successful group is
segmented by the judge (roles swapped), the drop is verified and lam * Delta (< 0) lands on it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from prover_core import (
    ChoiceJudge,
    DivergenceJudge,
    ProverConfig,
    SegmentRules,
    SnapshotEnv,
    Trajectory,
    compute_bonus,
)
from prover_core.data import Decline, Proposal
from prover_core.demo import MDPEnv, VaultMDP, exact_success_probability, vault_policy
from prover_core.demo.run import states_along
from prover_core.demo.vault import VAULT_WEIGHTS
from prover_core.record import record_episode
from prover_core.trigger import longest_failure
from tests.conftest import make_trajectory


class Recording:
    """Wraps a judge and records which run it was asked to segment, and against which runs."""

    def __init__(self) -> None:
        self.inner = DivergenceJudge()
        self.calls: list[tuple[str, list[str]]] = []

    def propose(self, success: Trajectory, others: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        self.calls.append((success.id, [t.id for t in others]))
        return self.inner.propose(success, others, rules)


def batch() -> list[Trajectory]:
    good = [make_trajectory(f"s{i}", "g", True, ["a", "b", "c", "d"]) for i in range(3)]
    bad = make_trajectory("f", "g", False, ["a", "x", "y", "z", "w"], ["s0", "s1", "bad2", "bad3", "bad4"])
    return [*good, bad]


def hook(trajectory: Trajectory, turn: int, seed: int) -> bool:
    """On f: success is certain before its mistake at turn 1 and impossible after it."""
    assert trajectory.id == "f"
    return turn <= 1


def test_off_by_default() -> None:
    result = compute_bonus(batch(), judge=DivergenceJudge(), continue_from=hook)
    (record,) = result.report.groups
    assert record.status == "not_eligible" and record.direction == "gain"
    assert not any(b.any() for b in result.turn_bonus.values())
    assert "prover/negative/groups" not in result.report.metrics()


def test_negative_credit_by_hand() -> None:
    judge = Recording()
    cfg = ProverConfig(k=8, negative_credit=True, negative_lam=0.5)
    result = compute_bonus(batch(), judge=judge, continue_from=hook, config=cfg)
    assert judge.calls == [("f", ["s0", "s1", "s2"])]  # the failed run is segmented against the successes
    (record,) = result.report.groups
    assert record.status == "accepted" and record.direction == "drop" and record.trajectory_id == "f"
    assert record.proposal is not None and (record.proposal.segment.start, record.proposal.segment.end) == (1, 1)
    v = record.verification
    assert v is not None and (v.pre_successes, v.pre_count, v.post_successes, v.post_count) == (8, 8, 0, 8)
    assert v.delta == -1.0 and "drop" in v.reason
    np.testing.assert_array_equal(result.turn_bonus["f"], [0.0, -0.5, 0.0, 0.0, 0.0])
    assert all(not result.turn_bonus[f"s{i}"].any() for i in range(3))
    # GRPO advantages are untouched: f = 0 - 0.75
    assert result.advantages["f"] == pytest.approx(-0.75)
    m = result.report.metrics(prefix="")
    assert m["negative/groups_accepted"] == 1 and m["negative/mean_delta_accepted"] == -1.0
    assert m["groups_accepted"] == 0  # positive-credit counts stay about positive credit
    assert m["continuations"] == 16


def test_the_lambda_of_negative_credit_defaults_to_lam() -> None:
    assert ProverConfig(lam=0.25).stages.credit.lam_for("drop") == 0.25
    assert ProverConfig(lam=0.25, negative_lam=0.5).stages.credit.lam_for("drop") == 0.5
    assert ProverConfig(lam=0.25, negative_lam=0.0).stages.credit.lam_for("drop") == 0.0  # 0 is a value, not "unset"
    assert ProverConfig(lam=0.25, negative_lam=0.5).stages.credit.lam_for("gain") == 0.25


def test_no_drop_no_negative_credit() -> None:
    cfg = ProverConfig(negative_credit=True)
    result = compute_bonus(batch(), judge=DivergenceJudge(), continue_from=lambda t, turn, s: True, config=cfg)
    (record,) = result.report.groups
    assert record.status == "rejected" and not result.turn_bonus["f"].any()
    cfg = ProverConfig(negative_credit=True, sampling="adaptive")
    result = compute_bonus(batch(), judge=DivergenceJudge(), continue_from=hook, config=cfg)
    (record,) = result.report.groups
    assert record.status == "accepted" and record.verify_stats is not None and record.verify_stats.spent < 16


def test_longest_failure_tie_break() -> None:
    runs = [
        make_trajectory("b", "g", False, list("xyz")),
        make_trajectory("a", "g", False, list("xyz")),
        make_trajectory("c", "g", True, list("xyzw")),
    ]
    assert longest_failure(runs).id == "a"
    with pytest.raises(ValueError):
        longest_failure(runs[2:])


def test_vault_negative_credit_matches_exact_values() -> None:
    """A policy that usually takes the key; a failed run that walked past it gets negative credit on that step,
    whose exact drop V(s_post) - V(s_pre) = 0 - V(key room, no key)."""
    mdp = VaultMDP()
    weights = {**VAULT_WEIGHTS, "take key": 8.0}
    policy = vault_policy(weights)
    value = exact_success_probability(mdp, policy)
    batch_ = [
        record_episode(
            MDPEnv(mdp),
            policy,
            reset={"seed": g * 101 + i},
            trajectory_id=f"g{g:02d}-{i}",
            group_id=f"g{g:02d}",
            seed=g * 31 + i + 7,
            token_length=lambda x: len(str(x).split()),
        )
        for g in range(12)
        for i in range(8)
    ]
    cfg = ProverConfig(negative_credit=True, k=8)
    result = compute_bonus(
        batch_, judge=DivergenceJudge(), env=SnapshotEnv(lambda: MDPEnv(mdp)), policy=policy, config=cfg
    )
    drops = [g for g in result.report.groups if g.direction == "drop" and g.verification is not None]
    assert drops, "some group must succeed in more than half of its runs"
    credited = walked_past_key = 0
    for g in drops:
        assert g.proposal is not None and g.verification is not None and g.trajectory_id is not None
        traj = result.trajectories[g.trajectory_id]
        assert not traj.success
        seg = g.proposal.segment
        states = states_along(mdp, traj)
        v_pre = value(states[seg.start], mdp.horizon - seg.start)
        v_post = value(states[seg.end + 1], mdp.horizon - seg.end - 1)
        if g.status == "accepted":
            credited += 1
            assert g.verification.delta < 0 and v_post < v_pre  # a real drop
            expected = np.zeros(traj.num_turns)
            expected[seg.start : seg.end + 1] = g.verification.delta
            np.testing.assert_allclose(result.turn_bonus[traj.id], expected)
            if traj.turns[seg.start].action == "go east" and "key glints" in str(traj.turns[seg.start].observation):
                walked_past_key += 1
                assert v_post == 0.0 and g.verification.post_successes == 0
    assert credited >= 1 and walked_past_key >= 1


def test_the_choice_judge_under_swapped_roles_counts_the_other_failed_runs() -> None:
    # 4 successes go a, b, c; the longest failure 'f' and a second failure 'f2' both chose 'x' at 's1'. With
    # the roles swapped, 'f2' is the other run with f's outcome: it made the same mistake at the same state,
    # so the choice is evidence (6 runs at 's1': 2 failed, both among the 2 that chose 'x', p = 1/C(6,2) = 1/15).
    good = [make_trajectory(f"s{i}", "g", True, ["a", "b", "c"]) for i in range(4)]
    f = make_trajectory("f", "g", False, ["a", "x", "y", "z"], ["s0", "s1", "bad2", "bad3"])
    f2 = make_trajectory("f2", "g", False, ["a", "x", "y"], ["s0", "s1", "bad2"])
    result = compute_bonus(
        [*good, f, f2],
        judge=ChoiceJudge(),
        continue_from=lambda t, turn, seed: turn <= 1,
        config=ProverConfig(k=8, negative_credit=True),
    )
    (record,) = result.report.groups
    assert record.direction == "drop" and record.trajectory_id == "f" and record.proposal is not None
    assert (record.proposal.segment.start, record.proposal.segment.end) == (1, 1)
    assert "1 of 1 other failed run(s) there did too (p=0.07" in record.proposal.rationale
    assert "4 successful run(s) stood at the same state, 0 chose 'x'" in record.proposal.rationale
    assert record.status == "accepted" and result.turn_bonus["f"][1] == pytest.approx(-1.0)
