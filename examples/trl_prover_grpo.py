"""ProVer inside TRL's GRPOTrainer, on CPU, offline, in under a minute (most of it importing torch and TRL).

A tiny randomly initialised Llama and a word-level tokenizer built from local text play the
three-turn LuckyDoor environment through a multi-turn ``rollout_func``. The only change from stock
TRL is the class name (``ProverGRPOTrainer``) and the ``prover=`` argument: a judge, a restorable
environment (``ReplayEnv`` replays the recorded actions) and the ProVer configuration. Continuations
use the trainer's own generation with the current weights.

    python examples/trl_prover_grpo.py [--steps 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

# transformers 5 deprecates names that TRL itself calls (gradient_checkpointing, ...): nothing a user of this
# example can act on, so those FutureWarnings are not shown
warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the example's offline toys: examples/trl_toy.py


def main(steps: int = 4, output_dir: str | None = None) -> list[dict[str, Any]]:
    """Train ``steps`` optimizer steps and return TRL's log history (with the ``prover/`` metrics)."""
    from datasets import Dataset
    from trl import GRPOConfig

    from prover_core import ProverConfig, ReplayEnv
    from prover_trl import ProverGRPOTrainer, ProverSetup, make_rollout_func, success_reward
    from trl_toy import FixedJudge, LuckyDoor, tiny_causal_lm, word_tokenizer  # examples/trl_toy.py

    tokenizer = word_tokenizer()
    args = GRPOConfig(
        output_dir=output_dir or tempfile.mkdtemp(prefix="prover-trl-"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_steps=steps,
        max_completion_length=3,  # tokens per action
        learning_rate=1e-2,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = ProverGRPOTrainer(
        model=tiny_causal_lm(tokenizer),
        reward_funcs=success_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["enter"] * 16}),
        processing_class=tokenizer,
        rollout_func=make_rollout_func(LuckyDoor, max_turns=5),
        prover=ProverSetup(
            # not the default ChoiceJudge(): the toy's pivot is known, so a fixed judge makes the output exact
            judge=FixedJudge(1, 1),
            env=ReplayEnv(LuckyDoor),
            config=ProverConfig(k=4),
        ),
    )
    trainer.train()
    return list(trainer.state.log_history)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    logs = main(parser.parse_args().steps)
    for log in logs:
        if "prover/groups" in log:
            keys = ("loss", "prover/groups_accepted", "prover/mean_delta_accepted", "prover/bonus_tokens")
            keys += ("prover/extra_turn_share",)  # the cost: continuation policy turns over the rollout's
            print({k: round(float(log[k]), 4) for k in keys})
