"""Calling compute_bonus from a custom trainer step, on the embedded vault environment.

    python examples/custom_trainer.py

A real trainer replaces `rollout_batch` with its own rollout and feeds `advantages` to its loss.
"""

from __future__ import annotations

import numpy as np

from prover_core import ChoiceJudge, ProverConfig, SnapshotEnv, compute_bonus
from prover_core.demo import MDPEnv, VaultBatchPolicy, VaultMDP
from prover_core.demo.run import rollout_batch


def trainer_step(step: int) -> dict[str, float]:
    mdp = VaultMDP()
    episodes = rollout_batch(mdp, groups=8, group_size=8, seed=step)  # your rollout: Trajectory objects
    max_len = max(t.turns[-1].token_span[1] for t in episodes if t.turns[-1].token_span)

    result = compute_bonus(
        episodes,
        judge=ChoiceJudge(),
        env=SnapshotEnv(lambda: MDPEnv(mdp)),  # restores any turn by replay + copy
        policy=VaultBatchPolicy(),  # the *current* policy: act_batch(contexts), one call per round
        config=ProverConfig(k=4, lam=1.0, seed=step),  # k=4: the library default (the paper: 8)
    )
    # (B, T) advantages for the loss: GRPO + bonus on action tokens, 0 on environment tokens.
    advantages = np.stack([result.token_advantages(t.id, max_len) for t in episodes])
    metrics = result.report.metrics()
    metrics["prover/max_token_advantage"] = float(advantages.max())
    for group in result.report.skips:
        print(f"step {step}: group {group.group_id} kept GRPO credit: {group.reason}")
    return metrics


if __name__ == "__main__":
    for step in range(3):
        m = trainer_step(step)
        print(
            f"step {step}: accepted {m['prover/groups_accepted']:.0f}/{m['prover/groups_eligible']:.0f} eligible, "
            f"mean Delta {m['prover/mean_delta_accepted']:.2f}, extra turns {100 * m['prover/extra_turn_share']:.0f}%"
        )
