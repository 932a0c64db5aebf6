"""``prover/credit_share`` and ``prover/trigger_share`` (issue 51): how large the credit is next to the update's
advantage, against batches worked by hand."""

from collections.abc import Sequence

import numpy as np
import pytest

from prover_core import Proposal, ProverConfig, Segment, SegmentRules, Trajectory, compute_bonus
from prover_core.credit import credit_masses, turn_weights
from prover_core.report import GroupRecord, Report
from tests.conftest import make_trajectory


class TurnJudge:
    def __init__(self, turn: int) -> None:
        self.turn = turn

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal:
        return Proposal(segment=Segment(trajectory_id=success.id, start=self.turn, end=self.turn), rationale="fixed")


def four_of_a_hundred() -> list[Trajectory]:
    """One group of 4, one success, 5 turns each of 5 action tokens, except the success's turn 2, 4 tokens wide: 99
    trainable tokens, the bonus (when turn 2 is accepted) on 4 of them."""
    runs = [make_trajectory(f"t{i}", "g", i == 0, list("abcde"), span_width=5) for i in range(4)]
    wide = runs[0]
    turns = list(wide.turns)
    a, _ = turns[2].token_span  # type: ignore[misc]
    turns[2] = turns[2].model_copy(update={"token_span": (a, a + 4)})
    runs[0] = wide.model_copy(update={"turns": tuple(turns)})
    return runs


def test_credit_share_by_hand_a_bonus_on_4_tokens() -> None:
    # GRPO, mean-centred: the success 1 - 1/4 = 0.75 on its 24 tokens, each failure -0.25 on 25:
    # sum |A| = 0.75 x 24 + 3 x 0.25 x 25 = 18 + 18.75 = 36.75. The judge's turn 2 (4 tokens) gets lam x Delta with
    # Delta = 1 (every continuation before turn 2 fails, every one after it succeeds) and lam = 0.5: 4 x 0.5 = 2.
    batch = four_of_a_hundred()
    result = compute_bonus(
        batch,
        judge=TurnJudge(2),
        continue_from=lambda t, turn, seed: turn >= 3,
        config=ProverConfig(k=2, lam=0.5),
    )
    report = result.report
    assert report.count("accepted") == 1
    assert report.credit_mass == pytest.approx(2.0)
    assert report.advantage_mass == pytest.approx(36.75)
    m = report.metrics()
    assert m["prover/credit_share"] == pytest.approx(2.0 / 36.75)
    assert m["prover/trigger_share"] == 1.0


def test_credit_share_is_the_same_sum_over_host_tensors() -> None:
    """The adapters' form: the host's (B, T) advantage, bonus and mask give the same two sums as the turn form."""
    batch = four_of_a_hundred()
    result = compute_bonus(
        batch, judge=TurnJudge(2), continue_from=lambda t, turn, seed: turn >= 3, config=ProverConfig(k=2, lam=0.5)
    )
    length = 40
    ids = [t.id for t in batch]
    bonus = result.bonus_matrix(ids, length)
    mask = np.stack([(result.token_advantages(tid, length) != 0) | (bonus[i] != 0) for i, tid in enumerate(ids)])
    base = np.array([[result.advantages[tid]] * length for tid in ids])
    assert credit_masses(bonus, base, mask) == pytest.approx((2.0, 36.75))
    # positions outside the mask count for nothing, whatever they hold
    assert credit_masses(bonus + 9 * ~mask, base + 9 * ~mask, mask) == pytest.approx((2.0, 36.75))
    with pytest.raises(ValueError, match="one shape"):
        credit_masses(bonus[:, :3], base, mask)
    # both signs count by their size: a debit (negative credit) does not cancel a bonus, nor a negative advantage
    assert credit_masses([[-1.0, 2.0, 5.0]], [[1.0, -1.0, 9.0]], [[1, 1, 0]]) == (3.0, 2.0)


def test_turn_weights_count_a_turn_without_span_once() -> None:
    t = make_trajectory("a", "g", True, list("xyz"), span_width=3)
    np.testing.assert_array_equal(turn_weights(t), [3, 3, 3])
    bare = t.model_copy(update={"turns": tuple(x.model_copy(update={"token_span": None}) for x in t.turns)})
    np.testing.assert_array_equal(turn_weights(bare), [1, 1, 1])


def test_trigger_share_counts_the_groups_in_either_band() -> None:
    """Groups of 4 with 0, 1, 2, 3, 4 successes: the band (0, 0.5) holds 1 (1/5 = 0.2); with negative credit on its
    band (0.5, 1) holds 3 as well (2/5); a rejected or declined group is still inside the band."""
    batch = [make_trajectory(f"g{n}-{i}", f"g{n}", i < n, list("abcd")) for n in range(5) for i in range(4)]

    def share(**kw: object) -> float:
        r = compute_bonus(batch, judge=TurnJudge(1), continue_from=lambda t, turn, seed: False,
                          config=ProverConfig(k=2, **kw))  # fmt: skip
        return r.report.metrics()["prover/trigger_share"]

    assert share() == pytest.approx(1 / 5)
    assert share(negative_credit=True) == pytest.approx(2 / 5)
    assert share(trigger_low=0.0, trigger_high=1.0) == pytest.approx(3 / 5)


def test_no_credit_no_share_and_an_empty_report() -> None:
    report = Report()
    assert report.credit_share == 0.0 and report.trigger_share == 0.0
    solo = Report(groups=[GroupRecord(group_id="g", size=4, successes=0, status="not_eligible")])
    assert solo.with_masses(0.0, 0.0).metrics()["prover/credit_share"] == 0.0
    assert solo.with_masses(1.0, 4.0).metrics()["prover/credit_share"] == 0.25
