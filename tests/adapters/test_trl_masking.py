"""The TRL adapter keeps the bonus off environment tokens even when an explicit turn span covers one.

``prover_turn_spans`` may include a masked token (a tool-call delimiter inside an action, say): the turn's
credit is spread over the whole span, then multiplied by TRL's trainable mask (``completion_mask *
tool_mask``), so the environment token inside the span gets nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.hosts import require_host

trl = require_host("trl")

import torch  # noqa: E402

from examples.trl_toy import FixedJudge, LuckyDoor  # noqa: E402
from prover_core import ProverConfig, ReplayEnv  # noqa: E402
from prover_trl import ProverGRPOTrainer, ProverSetup, make_rollout_func  # noqa: E402
from tests.adapters.test_trl_trainer import K, _build  # noqa: E402


def test_an_explicit_span_over_an_env_token_gets_no_bonus_there(tmp_path: Path) -> None:
    full = make_rollout_func(LuckyDoor, max_turns=5)

    def wide(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        out = full(prompts, trainer)
        # turn 1's span takes in the next token: the first token of the observation that follows (an env token)
        out["prover_turn_spans"] = [
            [[a, b + 1] if t == 1 else [a, b] for t, (a, b) in enumerate(row)] for row in out["prover_turn_spans"]
        ]
        return out

    prover = ProverSetup(judge=FixedJudge(1, 1), env=ReplayEnv(LuckyDoor), config=ProverConfig(k=K))
    trainer = _build(tmp_path, ProverGRPOTrainer, wide, prover=prover)
    trainer.train()
    assert len(trainer.loss_inputs) == 2
    for result, inputs in zip(trainer.results, trainer.loss_inputs, strict=True):
        (record,) = result.report.groups
        assert record.status == "accepted"
        lucky = result.trajectories[record.trajectory_id]
        start, end = lucky.turns[1].token_span
        (b,) = [i for i, r in enumerate(inputs["prover_row"].tolist()) if r == int(lucky.id.split(":")[1])]
        trainable = (inputs["completion_mask"] * inputs["tool_mask"])[b]
        assert trainable[end - 1] == 0 and trainable[start : end - 1].eq(1).all()  # the span ends on an env token
        bonus = inputs["prover_bonus"][b]
        assert bonus[start : end - 1].eq(1.0).all()  # lam * Delta = 1 on the action's tokens
        assert bonus[end - 1] == 0.0  # and nothing on the env token inside the span
        assert bonus.sum() == end - 1 - start and torch.count_nonzero(inputs["prover_bonus"]) == end - 1 - start
        assert torch.equal(inputs["advantages"][b], inputs["advantages"][b, 0] + bonus)
