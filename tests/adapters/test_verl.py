"""``adv_estimator=prover`` through verl's own ``compute_advantage`` on hand-built ``DataProto`` batches.

Batch used throughout (response length 10):

* group ``g0`` (success rate 1/4, eligible): ``a0`` succeeds in 3 turns, response_mask
  ``1101110100`` (turns = runs [0,2), [3,6), [7,8)); ``a1..a3`` fail in 2 turns, ``1110011000``.
* group ``g1`` (rate 1/2, not eligible): ``b0`` succeeds, ``b1`` fails, one turn each.

The judge nominates turn 1 of ``a0``; with K=4, 1 of the 4 continuations from before turn 1 and 3 of
the 4 from after it succeed, so Delta = 3/4 - 1/4 = 1/2 and, with lam = 2, tokens 3..5 of row 0 get
A_GRPO + 1. GRPO by hand: g0 scores (1,0,0,0): mean 1/4, std (ddof 1) 1/2; g1 (1,0): mean 1/2,
std sqrt(1/2).
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest

from tests.hosts import require_host

verl = require_host("verl")

import torch  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402

import prover_verl  # noqa: E402
from prover_core import Decline, Proposal, ProverConfig, ProverRun, Segment, SegmentRules, Trajectory, Turn  # noqa: E402
from prover_verl import (  # noqa: E402
    HookMissingError,
    ProverStep,
    RowAlignmentError,
    RowTurns,
    TurnAlignmentError,
    prover_step,
    rows_from_batch,
    set_prover_step,
    trajectories_from_batch,
)

prover_verl.register()

T = 10
MASK_A0 = [1, 1, 0, 1, 1, 1, 0, 1, 0, 0]
MASK_FAIL = [1, 1, 1, 0, 0, 1, 1, 0, 0, 0]
MASK_ONE = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
SEGMENT_TOKENS = [3, 4, 5]
LAM, DELTA = 2.0, 0.5


class TurnJudge:
    """Nominates turn ``turn`` of the successful run (a fixed rule, as a user's judge would be)."""

    def __init__(self, turn: int = 1, decline: bool = False) -> None:
        self.turn, self.decline = turn, decline

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        if self.decline:
            return Decline(reason="nothing to nominate")
        return Proposal(segment=Segment(trajectory_id=success.id, start=self.turn, end=self.turn))


class CountingContinuations:
    """``continue_from``: the first ``wins[turn]`` continuations from ``s_turn`` succeed, the rest fail."""

    def __init__(self, wins: dict[int, int]) -> None:
        self.wins = wins
        self.calls: Counter[tuple[str, int]] = Counter()

    def __call__(self, trajectory: Trajectory, turn: int, seed: int) -> bool:
        n = self.calls[(trajectory.id, turn)]
        self.calls[(trajectory.id, turn)] += 1
        return n < self.wins[turn]


def traj(tid: str, group: str, success: bool, n: int, spans: Sequence[tuple[int, int]] | None = None) -> Trajectory:
    turns = [
        Turn(observation=f"{tid}-o{t}", action=f"a{t}", token_span=None if spans is None else spans[t])
        for t in range(n)
    ]
    return Trajectory(id=tid, group_id=group, reset={"seed": 0}, turns=turns, success=success)


TRAJS = [
    traj("a0", "g0", True, 3),
    traj("a1", "g0", False, 2),
    traj("a2", "g0", False, 2),
    traj("a3", "g0", False, 2),
    traj("b0", "g1", True, 1),
    traj("b1", "g1", False, 1),
]
MASKS = [MASK_A0, MASK_FAIL, MASK_FAIL, MASK_FAIL, MASK_ONE, MASK_ONE]


def make_batch(
    masks: Sequence[Sequence[int]], scores: Sequence[float], uids: Sequence[str], **extra: object
) -> DataProto:
    """A DataProto as verl's trainer holds it: the outcome reward on each row's last response token."""
    mask = torch.tensor(masks, dtype=torch.int64)
    rewards = torch.zeros(mask.shape, dtype=torch.float32)
    for i, score in enumerate(scores):
        rewards[i, int(mask[i].nonzero().max())] = score
    non_tensors = {"uid": np.array(uids, dtype=object), **{k: np.array(v, dtype=object) for k, v in extra.items()}}
    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors=non_tensors)


def default_batch() -> DataProto:
    return make_batch(MASKS, [float(t.success) for t in TRAJS], [t.group_id for t in TRAJS])


def step(judge: TurnJudge | None = None, config: ProverConfig | None = None, **kw: object) -> ProverStep:
    """A step of a fresh one-step run (``judge``, ``config``), or of ``run=`` when given."""
    run = ProverRun(judge or TurnJudge(), config or ProverConfig(k=4, lam=LAM))
    args: dict[str, object] = dict(trajectories=TRAJS, run=run, continue_from=CountingContinuations({1: 1, 2: 3}))
    args.update(kw)
    return ProverStep(**args)  # type: ignore[arg-type]


def algo(norm: bool) -> AlgoConfig:
    return AlgoConfig(adv_estimator="prover", norm_adv_by_std_in_grpo=norm)


def verl_grpo(data: DataProto, norm: bool) -> torch.Tensor:
    out = compute_advantage(data, adv_estimator="grpo", norm_adv_by_std_in_grpo=norm, config=algo(norm))
    return out.batch["advantages"]


def hand_grpo(norm: bool) -> list[float]:
    eps = 1e-6
    g0 = [0.75, -0.25, -0.25, -0.25]
    g1 = [0.5, -0.5]
    if norm:
        g0 = [a / (0.5 + eps) for a in g0]
        g1 = [a / (math.sqrt(0.5) + eps) for a in g1]
    return g0 + g1


@pytest.mark.parametrize("norm", [False, True])
def test_prover_is_grpo_outside_the_segment_and_grpo_plus_lam_delta_inside(norm: bool) -> None:
    grpo = verl_grpo(default_batch(), norm)
    with prover_step(step()) as s:
        out = compute_advantage(default_batch(), adv_estimator="prover", config=algo(norm))
    adv, returns = out.batch["advantages"], out.batch["returns"]
    assert torch.equal(adv, returns)

    inside = torch.zeros(adv.shape, dtype=torch.bool)
    inside[0, SEGMENT_TOKENS] = True
    assert torch.equal(adv[~inside], grpo[~inside])  # exactly verl's GRPO everywhere else
    torch.testing.assert_close(adv[inside], grpo[inside] + LAM * DELTA)

    mask = torch.tensor(MASKS, dtype=torch.float32)
    expected = torch.tensor(hand_grpo(norm), dtype=torch.float32)[:, None] * mask
    expected[0, SEGMENT_TOKENS] += LAM * DELTA  # 0.75 + 1 = 1.75 (norm off), 1.5 + 1 (norm on)
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-5)
    if not norm:
        assert adv[0].tolist() == pytest.approx([0.75, 0.75, 0, 1.75, 1.75, 1.75, 0, 0.75, 0, 0])

    assert s.result is not None and prover_verl.last_prover_step() is s
    [record] = [g for g in s.result.report.groups if g.group_id == "g0"]
    assert record.status == "accepted" and record.verification is not None
    assert record.verification.delta == DELTA
    assert s.result.report.summary()["not_eligible"] == 1  # g1


def test_only_the_representative_is_continued_k_times_from_each_boundary() -> None:
    fn = CountingContinuations({1: 1, 2: 3})
    with prover_step(step(continue_from=fn)):
        compute_advantage(default_batch(), adv_estimator="prover", config=algo(False))
    assert dict(fn.calls) == {("a0", 1): 4, ("a0", 2): 4}


@pytest.mark.parametrize(
    ("judge", "wins"),
    [(TurnJudge(decline=True), {1: 1, 2: 3}), (TurnJudge(), {1: 3, 2: 1})],
    ids=["declined", "rejected"],
)
def test_without_an_accepted_segment_the_result_is_exactly_grpo(judge: TurnJudge, wins: dict[int, int]) -> None:
    grpo = verl_grpo(default_batch(), True)
    with prover_step(step(judge=judge, continue_from=CountingContinuations(wins))) as s:
        out = compute_advantage(default_batch(), adv_estimator="prover", config=algo(True))
    assert torch.equal(out.batch["advantages"], grpo)
    assert s.result is not None and s.result.report.count("accepted") == 0


def test_missing_hook_is_a_clear_error_and_a_step_is_used_once() -> None:
    with pytest.raises(HookMissingError, match="set_prover_step"):
        compute_advantage(default_batch(), adv_estimator="prover", config=algo(False))
    set_prover_step(step())
    compute_advantage(default_batch(), adv_estimator="prover", config=algo(False))
    with pytest.raises(HookMissingError):  # never reused for the next batch
        compute_advantage(default_batch(), adv_estimator="prover", config=algo(False))


def test_unused_step_is_dropped_when_the_block_exits() -> None:
    with prover_step(step()):
        pass
    with pytest.raises(HookMissingError):
        compute_advantage(default_batch(), adv_estimator="prover", config=algo(False))


def test_rows_out_of_group_order_are_rejected() -> None:
    # rows 3 and 4 swapped: row 3's uid is g0 but the step says b0 (group g1)
    rows = ["a0", "a1", "a2", "b0", "a3", "b1"]
    with prover_step(step(rows=rows)), pytest.raises(RowAlignmentError, match="uid"):
        compute_advantage(default_batch(), adv_estimator="prover", config=algo(False))


def test_rows_swapped_inside_a_group_are_caught_by_the_rewards() -> None:
    rows = ["a1", "a0", "a2", "a3", "b0", "b1"]  # row 0 scores 1 but a1 failed
    with prover_step(step(rows=rows)), pytest.raises(RowAlignmentError, match="success"):
        compute_advantage(default_batch(), adv_estimator="prover", config=algo(False))


def test_row_count_and_coverage_are_checked() -> None:
    with prover_step(step(rows=["a0", "a1", "a2", "a3", "b0"])), pytest.raises(RowAlignmentError, match="6 rows"):
        compute_advantage(default_batch(), adv_estimator="prover", config=algo(False))
    twice = ["a0", "a1", "a2", "a2", "b0", "b1"]
    with prover_step(step(rows=twice)), pytest.raises(RowAlignmentError, match="exactly one row"):
        compute_advantage(default_batch(), adv_estimator="prover", config=algo(False))


def test_a_credited_row_whose_runs_do_not_match_its_turns_is_rejected() -> None:
    masks = [MASK_FAIL, *MASKS[1:]]  # a0 has 3 turns but only 2 runs of 1s
    data = make_batch(masks, [float(t.success) for t in TRAJS], [t.group_id for t in TRAJS])
    with prover_step(step()), pytest.raises(TurnAlignmentError, match="runs of 1s"):
        compute_advantage(data, adv_estimator="prover", config=algo(False))


def test_explicit_token_spans_override_the_runs_and_masked_tokens_get_nothing() -> None:
    # turn 1 spans [3, 6) but its middle token 4 is masked (say, a tool-call delimiter): 4 runs of 1s, 3 turns
    mask_a0 = [1, 1, 0, 1, 0, 1, 0, 1, 0, 0]
    trajs = [traj("a0", "g0", True, 3, spans=[(0, 2), (3, 6), (7, 8)]), *TRAJS[1:]]
    data = make_batch([mask_a0, *MASKS[1:]], [float(t.success) for t in trajs], [t.group_id for t in trajs])
    with prover_step(step(trajectories=trajs)):
        out = compute_advantage(data, adv_estimator="prover", config=algo(False))
    assert out.batch["advantages"][0].tolist() == pytest.approx([0.75, 0.75, 0, 1.75, 0, 1.75, 0, 0.75, 0, 0])


def test_one_row_per_environment_step_as_in_verl_agent() -> None:
    # every turn of every trajectory is its own row (one run of 1s each); a0's turn 1 is row 1
    rows: list[RowTurns] = []
    uids, scores, masks = [], [], []
    for t in TRAJS:
        for k in range(t.num_turns):
            rows.append(RowTurns(t.id, (k,)))
            uids.append(t.group_id)
            scores.append(float(t.success) if k == t.num_turns - 1 else 0.0)
            masks.append(MASK_ONE)
    data = make_batch(masks, scores, uids, traj_uid=[r.trajectory_id for r in rows], turn=[r.turns for r in rows])
    assert rows_from_batch(data, "traj_uid", "turn") == rows
    grpo = verl_grpo(make_batch(masks, scores, uids), False)
    with prover_step(step(rows=rows_from_batch(data, "traj_uid", "turn"))):
        out = compute_advantage(data, adv_estimator="prover", config=algo(False))
    adv = out.batch["advantages"]
    assert torch.equal(adv[torch.arange(len(rows)) != 1], grpo[torch.arange(len(rows)) != 1])
    torch.testing.assert_close(adv[1], grpo[1] + LAM * DELTA * torch.tensor(MASK_ONE, dtype=torch.float32))


def test_importing_the_adapter_imports_neither_torch_nor_verl() -> None:
    import subprocess

    code = "import sys, prover_verl; print(sorted(m for m in ('torch', 'verl') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_trajectories_recorded_in_the_batch_feed_the_step() -> None:
    # as an agent loop would record them in extra_fields (one column per key in non_tensor_batch)
    data = make_batch(
        MASKS,
        [float(t.success) for t in TRAJS],
        [t.group_id for t in TRAJS],
        prover_trajectory=[t.model_dump() for t in TRAJS],
    )
    assert trajectories_from_batch(data) == TRAJS
    with prover_step(step(trajectories=trajectories_from_batch(data))) as s:
        out = compute_advantage(data, adv_estimator="prover", config=algo(False))
    assert s.result is not None and s.result.report.count("accepted") == 1
    assert out.batch["advantages"][0, 3].item() == pytest.approx(0.75 + LAM * DELTA)


def test_default_rows_follow_the_order_of_the_trajectories_even_with_groups_interleaved() -> None:
    order = [4, 0, 5, 1, 2, 3]  # b0, a0, b1, a1, a2, a3
    trajs = [TRAJS[i] for i in order]
    data = make_batch([MASKS[i] for i in order], [float(t.success) for t in trajs], [t.group_id for t in trajs])
    with prover_step(step(trajectories=trajs)):
        adv = compute_advantage(data, adv_estimator="prover", config=algo(False)).batch["advantages"]
    assert adv[1].tolist() == pytest.approx([0.75, 0.75, 0, 1.75, 1.75, 1.75, 0, 0.75, 0, 0])
    assert adv[0, 0].item() == pytest.approx(0.5) and adv[2, 0].item() == pytest.approx(-0.5)


def test_a_runs_lift_window_pools_the_judge_against_chance_across_steps() -> None:
    """``ProverStep.run`` keeps the window: with ``control_share=1`` group g0 verifies a random control turn each
    step, and the run's window counts both (``prover/control_verified``)."""
    run = ProverRun(TurnJudge(), ProverConfig(k=4, lam=LAM, control_share=1.0, lift_window=10))
    assert run.window is not None
    window = run.window
    for n in (1, 2):
        continuations = CountingContinuations({0: 0, 1: 1, 2: 3})
        with prover_step(step(run=run, continue_from=continuations)) as s:
            compute_advantage(default_batch(), adv_estimator="prover", config=algo(False))
        assert s.result is not None
        (g0,) = [g for g in s.result.report.groups if g.group_id == "g0"]
        assert g0.control and g0.proposal is not None and g0.proposal.segment.num_turns == 1
        metrics = s.result.report.metrics()
        assert metrics["prover/control_verified"] == float(n) and metrics["prover/judge_verified"] == 0.0
        assert math.isnan(metrics["prover/judge_lift"]) and metrics["prover/groups_control"] == 1.0
    assert window.total.control_verified == 2
