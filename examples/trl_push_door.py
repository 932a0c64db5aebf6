"""ProVer inside TRL's GRPOTrainer on a task it can learn, with the library's default judge, on CPU in about a minute.

A tiny randomly initialised Llama plays ``PushDoor`` (examples/trl_toy.py): three turns, hall, door, through; the
episode succeeds iff the action at the door says ``push``, which the random model does about one time in eight. The
judge is the library's default, ``ChoiceJudge()``: it nominates the turn where the successful run chose what the
failed runs, standing in the same state, did not; verification measures ``Delta`` from the restored states; the
credit lands on that turn's tokens. The log shows the success rate rising over the steps, and where the accepted
credit landed (turn 1, the door, is the pivot). What it does not show: that the credit is why it learns. GRPO alone
learns this task too; the credit here is a few percent of the update (``prover/credit_share``), and
docs/benchmarks.md says where targeted credit has and has not moved learning.

    python examples/trl_push_door.py [--steps 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the example's offline toys: examples/trl_toy.py


def main(steps: int = 20, output_dir: str | None = None) -> list[dict[str, Any]]:
    """Train ``steps`` optimizer steps; one row per step: its success rate, the accepted groups, the turns their
    credit landed on, and ``prover/credit_share``."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig

    from prover_core import ChoiceJudge, ProverConfig, ReplayEnv
    from prover_trl import ProverGRPOTrainer, ProverSetup, make_rollout_func, success_reward
    from trl_toy import PushDoor, tiny_causal_lm, word_tokenizer  # examples/trl_toy.py

    tokenizer = word_tokenizer()
    args = GRPOConfig(
        output_dir=output_dir or tempfile.mkdtemp(prefix="prover-trl-"),
        per_device_train_batch_size=16,  # 4 prompts x 4 generations per step
        num_generations=4,
        max_steps=steps,
        max_completion_length=3,  # tokens per action
        learning_rate=1e-2,
        scale_rewards="none",  # the paper's GRPO: mean-centred only
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    rows: list[dict[str, Any]] = []

    class Record(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            report = trainer.prover_last_report
            if logs is None or "reward" not in logs or report is None:
                return
            accepted = [g.proposal.segment for g in report.groups if g.status == "accepted" and g.proposal]
            rows.append(
                {
                    "step": state.global_step,
                    "success": float(logs["reward"]),
                    "accepted": len(accepted),
                    "credited_turns": sorted({t for s in accepted for t in range(s.start, s.end + 1)}),
                    "credit_share": float(logs.get("prover/credit_share", 0.0)),
                }
            )

    trainer = ProverGRPOTrainer(
        model=tiny_causal_lm(tokenizer),
        reward_funcs=success_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["enter"] * (16 * steps)}),
        processing_class=tokenizer,
        rollout_func=make_rollout_func(PushDoor, max_turns=5),
        prover=ProverSetup(judge=ChoiceJudge(), env=ReplayEnv(PushDoor), config=ProverConfig(k=4)),
        callbacks=[Record()],
    )
    trainer.train()
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    rows = main(parser.parse_args().steps)
    for row in rows:
        print(
            f"step {row['step']:>2}: success {row['success']:.3f}, {row['accepted']} group(s) credited on turn(s) "
            f"{row['credited_turns'] or '-'}, credit share {100 * row['credit_share']:.1f}%"
        )
    first, last = rows[: len(rows) // 4], rows[-(len(rows) // 4) :]
    mean = lambda part: sum(r["success"] for r in part) / len(part)  # noqa: E731
    print(f"success: {mean(first):.3f} over the first quarter of the steps, {mean(last):.3f} over the last")
