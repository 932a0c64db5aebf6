"""ProverGRPOTrainer in TRL's vLLM server mode, with importance-sampling correction on, on CPU.

The trainer is a real ``GRPOTrainer(use_vllm=True, vllm_mode="server")``: TRL's ``VLLMGeneration``
generates the rollout through TRL's ``VLLMClient`` from a real HTTP server on 127.0.0.1 speaking vLLM's
``/v1/completions`` (``tests/adapters/vllm_loopback.py``, the same tiny model as the trainer's; the
NCCL weight transfer, which needs CUDA, copies the weights in-process). ProVer's default policy is an
``EnginePolicy`` over ``VLLMServerEngine`` on the main process.

LuckyDoor makes the verification outcome certain: segment (1, 1) of member 0's run has ``Delta = 1``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.hosts import require_host

trl = require_host("trl")
require_host("requests")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402

from examples.trl_toy import FixedJudge, LuckyDoor, tiny_causal_lm, word_tokenizer  # noqa: E402
from prover_core import ProverConfig, ReplayEnv  # noqa: E402
from prover_engine import EnginePolicy  # noqa: E402
from prover_trl import ProverGRPOTrainer, ProverSetup, make_rollout_func, success_reward  # noqa: E402
from prover_trl.engines import VLLMServerEngine  # noqa: E402
from tests.adapters.vllm_loopback import LoopbackVLLM, trl_server_mode  # noqa: E402

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
G = 4
K = 2


class Recording(ProverGRPOTrainer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loss_inputs: list[dict[str, Any]] = []
        self.results: list[Any] = []
        self.rollouts: list[dict[str, Any]] = []

    def _generate(self, prompts: list[Any]) -> Any:
        out = super()._generate(prompts)
        self.rollouts.append(
            {"prompt_ids": out[0], "completion_ids": out[1], "env_mask": out[2], "logprobs": out[4], "extra": out[5]}
        )
        return out

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        self.loss_inputs.append({k: v.clone() if torch.is_tensor(v) else v for k, v in inputs.items()})
        return super()._compute_loss(model, inputs)

    def _prover_bonus(self, output: dict[str, Any], resets: Any) -> Any:
        bonus = super()._prover_bonus(output, resets)
        self.results.append(self.prover_last_result)
        return bonus


def test_server_mode_rollout_logprobs_feed_importance_sampling_and_continuations_use_the_server(
    tmp_path: Path,
) -> None:
    tokenizer = word_tokenizer()
    with (
        LoopbackVLLM(tiny_causal_lm(tokenizer, seed=1), eos_token_id=tokenizer.eos_token_id) as server,
        trl_server_mode(server),
    ):
        args = trl.GRPOConfig(
            output_dir=str(tmp_path),
            per_device_train_batch_size=G,
            num_generations=G,
            max_steps=2,
            max_completion_length=3,
            learning_rate=1e-2,
            logging_steps=1,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            seed=0,
            disable_tqdm=True,
            use_vllm=True,
            vllm_mode="server",
            vllm_server_base_url=server.url,
            vllm_importance_sampling_correction=True,
            vllm_importance_sampling_mode="token_truncate",
        )
        trainer = Recording(
            model=tiny_causal_lm(tokenizer, seed=0),  # different from the server's: the weight sync must happen
            reward_funcs=success_reward,
            args=args,
            train_dataset=Dataset.from_dict({"prompt": ["enter"] * 8}),
            processing_class=tokenizer,
            rollout_func=make_rollout_func(LuckyDoor, max_turns=5),
            prover=ProverSetup(judge=FixedJudge(1, 1), env=ReplayEnv(LuckyDoor), config=ProverConfig(k=K)),
        )
        assert trainer.prover_verify_on == "main"
        assert isinstance(trainer.prover_policy, EnginePolicy)
        assert isinstance(trainer.prover_policy.engine, VLLMServerEngine)
        trainer.train()

    assert trainer.state.global_step == 2 and len(trainer.loss_inputs) == 2
    assert server.prefix_cache_resets >= 1  # TRL's own sync_weights ran (and reset the server's cache)
    for rollout, inputs, result in zip(trainer.rollouts, trainer.loss_inputs, trainer.results, strict=True):
        # The rollout's logprobs: one per completion token, 0.0 on observation tokens.
        assert rollout["logprobs"] is not None
        assert [len(lp) for lp in rollout["logprobs"]] == [len(ids) for ids in rollout["completion_ids"]]
        # TRL's importance-sampling correction used them: the sampling logprobs (server, synced weights) equal
        # TRL's own recomputation on the trainable tokens up to float noise (batched, padded forward vs one
        # sequence: ~1e-3), so the ratio is 1 there. Missing logprobs crash TRL; misaligned ones differ by the
        # spread of the model's logprobs, which is two orders of magnitude larger.
        mask = (inputs["completion_mask"] * inputs["tool_mask"]).bool()
        ratio = inputs["importance_sampling_ratio"]
        assert mask.sum() > 0 and torch.allclose(ratio[mask], torch.ones_like(ratio[mask]), atol=5e-3)
        sampled = inputs["sampling_per_token_logps"][mask]
        assert (sampled < 0).all() and float(sampled.max() - sampled.min()) > 0.1  # real, varied log-probabilities
        for row in range(len(inputs["completion_ids"])):  # observation tokens carry 0.0
            off = (inputs["completion_mask"][row].bool()) & ~(inputs["tool_mask"][row].bool())
            assert (inputs["sampling_per_token_logps"][row][off] == 0).all()
        # Exact turn spans: every span is one run of the env mask, in order.
        for spans, mask_row in zip(rollout["extra"]["prover_turn_spans"], rollout["env_mask"], strict=True):
            runs, inside = [], False
            for k, m in enumerate(mask_row):
                if m and not inside:
                    runs.append([k, k])
                if m:
                    runs[-1][1] = k + 1
                inside = bool(m)
            assert [list(s) for s in spans] == runs

        # Verification ran on the server through the engine: Delta = 1 and the bonus on turn 1's tokens.
        (record,) = result.report.groups
        assert record.status == "accepted"
        v = record.verification
        assert (v.pre_successes, v.pre_count, v.post_successes, v.post_count) == (0, K, K, K)
        lucky = result.trajectories[record.trajectory_id]
        row = int(lucky.id.split(":")[1])
        (b,) = [i for i, r in enumerate(inputs["prover_row"].tolist()) if r == row]
        start, end = lucky.turns[1].token_span
        assert inputs["prover_bonus"][b, start:end].eq(1.0).all() and inputs["prover_bonus"].sum() == end - start
        prompt = list(rollout["prompt_ids"][row])
        completion = list(rollout["completion_ids"][row])
        pre = prompt + completion[: lucky.turns[1].token_span[0]]
        post = prompt + completion[: lucky.turns[2].token_span[0]]
        seeded = [r["prompt"][0] for r in server.requests if "seed" in r]  # the rollout sends no seed
        assert seeded.count(pre) >= K and seeded.count(post) >= K

    logged = [log for log in trainer.state.log_history if "prover/groups_accepted" in log]
    assert [log["prover/groups_accepted"] for log in logged] == [1.0, 1.0]
    # 2K continuations for the one verified group, over the batch's G episodes.
    assert [log["prover/continuation_share"] for log in logged] == [2 * K / G] * 2
    assert all(log["prover/continuation_tokens"] > 0 for log in logged)
    assert all(abs(log["sampling/importance_sampling_ratio/max"] - 1) < 5e-3 for log in logged)
