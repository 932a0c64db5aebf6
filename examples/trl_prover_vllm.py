"""ProVer inside TRL's GRPOTrainer with vLLM server mode on several GPUs: a worked launch script.

One GPU serves the policy with vLLM; the others train. The rollout (``make_rollout_func``, chat
rendering with the model's own template) generates through TRL's ``VLLMGeneration``; ProVer's
continuations go to the same server from the main process (the only one holding TRL's
``VLLMClient``), one seeded request per action, all of a step's continuations in flight together.
The server holds the current weights: TRL pushes them before the step's rollout, and verification
runs right after it, in the same step.

    # GPU 0: the server (TRL's launcher for `vllm serve`: NCCL weight transfer, processed logprobs)
    CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model Qwen/Qwen2.5-0.5B-Instruct --port 8000

    # GPUs 1-4: four training processes
    CUDA_VISIBLE_DEVICES=1,2,3,4 accelerate launch --num_processes 4 examples/trl_prover_vllm.py \\
        --model Qwen/Qwen2.5-0.5B-Instruct --vllm-url http://127.0.0.1:8000 --steps 100

The environment here is the toy ``LuckyDoor`` (replace ``make_env`` with yours: ``reset(spec) -> Step``,
``step(action) -> Step``; ``ReplayEnv`` restores a turn by replaying the recorded actions). Not run on a
GPU in this repository; ``tests/adapters/test_trl_example.py`` runs :func:`build_trainer` on CPU against
a loopback server speaking vLLM's ``/v1/completions``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the toy environment: examples/trl_toy.py

BATCH = 8  # rows per process and generation; groups of G = 8 completions of one prompt


def build_trainer(
    model: Any,
    tokenizer: Any,
    *,
    vllm_url: str,
    output_dir: str,
    steps: int,
    k: int = 4,
    per_device_batch: int = BATCH,
    num_generations: int = BATCH,
    max_action_tokens: int = 32,
    use_cpu: bool = False,
    judge: Any = None,
) -> Any:
    """The ``ProverGRPOTrainer`` of this launch: vLLM server mode, chat rendering, ProVer with K continuations."""
    from datasets import Dataset
    from trl import GRPOConfig

    from prover_core import ChoiceJudge, ProverConfig, ReplayEnv
    from prover_trl import ChatRenderer, ProverGRPOTrainer, ProverSetup, make_rollout_func, success_reward
    from trl_toy import LuckyDoor  # examples/trl_toy.py

    chat = ChatRenderer(tokenizer)
    args = GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=per_device_batch,
        num_generations=num_generations,
        max_steps=steps,
        max_completion_length=max_action_tokens,  # per action: the rollout calls the backend once per turn
        learning_rate=1e-6,
        scale_rewards="none",  # the paper's setting: A_GRPO = r - mean(r)
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=use_cpu,
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_url=vllm_url,
        vllm_importance_sampling_correction=True,  # on the rollout's per-token logprobs
    )
    return ProverGRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [[{"role": "user", "content": "enter"}]] * 4096}),
        reward_funcs=success_reward,
        rollout_func=make_rollout_func(
            LuckyDoor, max_turns=5, render_prompt=chat.prompt, render_observation=chat.observation
        ),
        prover=ProverSetup(
            judge=judge or ChoiceJudge(),  # the default; or prover_core's LLM judge (any OpenAI-compatible server)
            env=ReplayEnv(LuckyDoor),
            config=ProverConfig(k=k, lam=1.0),
            policy_options={"render_observation": chat.observation, "max_concurrency": 256, "timeout_s": 120.0},
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--vllm-url", default="http://127.0.0.1:8000")
    parser.add_argument("--output-dir", default="prover-trl-vllm")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--k", type=int, default=4)
    opts = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(opts.model)
    model = AutoModelForCausalLM.from_pretrained(opts.model, dtype="bfloat16")
    trainer = build_trainer(
        model, tokenizer, vllm_url=opts.vllm_url, output_dir=opts.output_dir, steps=opts.steps, k=opts.k
    )
    trainer.train()


if __name__ == "__main__":
    main()
