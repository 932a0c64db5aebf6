"""``adv_estimator=prover`` equals ``grpo`` on every trainer path when nothing is accepted (verl 0.9.1).

The v1 trainer computes advantages with ``verl.trainer.ppo.v1.utils.compute_advantage_for_multi_trajectories``:
for ``grpo`` it scores each session once, on its final output ``{uid}_{session}_{max index}``, and
broadcasts that advantage to the session's other outputs; every other estimator runs over all rows.

Batch (one group ``g``, four sessions, rewards as verl's agent loop gives them: every output of a
session carries the final output's score): session 0 succeeds in three turns with two outputs (keys
``g_0_0``: turns 0 and 1, response_mask ``1010``; ``g_0_1``: turn 2), sessions 1..3 fail with one
output each. By hand, without std normalisation:

* grpo (one score per session): scores (1, 0, 0, 0), mean 1/4: session 0 gets 0.75, the rest -0.25;
* all rows (what verl does for any other estimator): scores (1, 1, 0, 0, 0), mean 2/5: 0.6 and -0.4.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest

from tests.hosts import require_host

require_host("verl")
require_host("transfer_queue")  # verl.trainer.ppo.v1 imports it

import torch  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories  # noqa: E402

import prover_verl  # noqa: E402
from prover_core import Decline, Proposal, ProverConfig, ProverRun, Segment, SegmentRules, Trajectory, Turn  # noqa: E402
from prover_verl import ProverStep, RowAlignmentError, RowTurns, prover_step  # noqa: E402

prover_verl.register()

KEYS = ["g_0_0", "g_0_1", "g_1_0", "g_2_0", "g_3_0"]
MASKS = [[1, 0, 1, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0]]
SCORES = [1.0, 1.0, 0.0, 0.0, 0.0]
ROWS: list[str | RowTurns] = [RowTurns("s0", (0, 1)), RowTurns("s0", (2,)), "s1", "s2", "s3"]


def trajectories() -> list[Trajectory]:
    def turns(n: int) -> list[Turn]:
        return [Turn(observation=f"o{t}", action=f"a{t}") for t in range(n)]

    return [
        Trajectory(id="s0", group_id="g", turns=turns(3), success=True),
        *(Trajectory(id=f"s{i}", group_id="g", turns=turns(1), success=False) for i in (1, 2, 3)),
    ]


def batch() -> DataProto:
    mask = torch.tensor(MASKS, dtype=torch.float32)
    rewards = torch.zeros_like(mask)
    for i, score in enumerate(SCORES):
        rewards[i, int(mask[i].nonzero().max())] = score
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": np.array(["g"] * len(KEYS), dtype=object)},
    )


class Judge:
    """Declines, or nominates turn ``turn`` of the successful run."""

    def __init__(self, turn: int | None) -> None:
        self.turn = turn

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        if self.turn is None:
            return Decline(reason="nothing to nominate")
        return Proposal(segment=Segment(trajectory_id=success.id, start=self.turn, end=self.turn))


def continuations(wins: dict[int, int]):  # type: ignore[no-untyped-def]
    calls: Counter[int] = Counter()

    def continue_from(trajectory: Trajectory, turn: int, seed: int) -> bool:
        calls[turn] += 1
        return calls[turn] <= wins[turn]

    return continue_from


def step(turn: int | None = None, batch_keys: Sequence[str] | None = KEYS) -> ProverStep:
    return ProverStep(
        trajectories=trajectories(),
        run=ProverRun(Judge(turn), ProverConfig(k=4, lam=2.0)),
        continue_from=continuations({1: 1, 2: 3}),
        rows=ROWS,
        batch_keys=batch_keys,
    )


def v1(estimator: str, norm: bool) -> torch.Tensor:
    """verl's v1 advantage step, as ``PPOTrainer._compute_advantage`` calls it."""
    config = AlgoConfig(adv_estimator=estimator, norm_adv_by_std_in_grpo=norm)
    out = compute_advantage_for_multi_trajectories(
        batch(), batch_keys=KEYS, adv_estimator=estimator, norm_adv_by_std_in_grpo=norm, config=config
    )
    return out.batch["advantages"]


def first_token(adv: torch.Tensor) -> list[float]:
    return [round(float(v), 6) for v in adv[:, 0]]


def test_verl_v1_grpo_scores_each_session_once() -> None:
    assert first_token(v1("grpo", norm=False)) == [0.75, 0.75, -0.25, -0.25, -0.25]


def test_without_batch_keys_verl_v1_routes_prover_over_all_rows_and_the_baseline_shifts() -> None:
    """The bug the issue reports, through verl's real function: with a step lacking ``batch_keys``."""
    with prover_step(step(batch_keys=None)):
        adv = v1("prover", norm=False)
    assert first_token(adv) == [0.6, 0.6, -0.4, -0.4, -0.4]


@pytest.mark.parametrize("norm", [False, True])
def test_with_batch_keys_prover_equals_grpo_on_the_v1_path_when_nothing_is_accepted(norm: bool) -> None:
    with prover_step(step()) as used:
        adv = v1("prover", norm=norm)
    assert torch.equal(adv, v1("grpo", norm=norm))
    assert used.result is not None and not used.result.turn_bonus["s0"].any()


@pytest.mark.parametrize("norm", [False, True])
def test_prover_equals_grpo_on_the_legacy_path_when_nothing_is_accepted(norm: bool) -> None:
    config = AlgoConfig(adv_estimator="prover", norm_adv_by_std_in_grpo=norm)
    with prover_step(step(batch_keys=None)):
        adv = compute_advantage(batch(), adv_estimator="prover", norm_adv_by_std_in_grpo=norm, config=config)
    grpo = compute_advantage(batch(), adv_estimator="grpo", norm_adv_by_std_in_grpo=norm, config=config)
    assert torch.equal(adv.batch["advantages"], grpo.batch["advantages"])


def test_an_accepted_segment_lands_on_the_output_holding_that_turn_over_the_v1_baseline() -> None:
    """Turn 1 of s0 (row ``g_0_0``, token 2): Delta = 3/4 - 1/4 = 1/2, lam = 2: +1 on that token only."""
    with prover_step(step(turn=1)):
        adv = v1("prover", norm=False)
    expected = torch.tensor([0.75, 0.75, -0.25, -0.25, -0.25])[:, None] * torch.tensor(MASKS, dtype=torch.float32)
    expected[0, 2] += 1.0
    torch.testing.assert_close(adv, expected)


def test_batch_keys_must_match_the_rows() -> None:
    with prover_step(step(batch_keys=KEYS[:-1])), pytest.raises(RowAlignmentError, match="4 batch_keys for 5 rows"):
        v1("prover", norm=False)
