#!/usr/bin/env bash
# ProVer on verl 0.9.1's default (v1) trainer: a worked launch with Hydra overrides. NOT RUN: it needs GPUs
# and vLLM (see docs/adapters/verl.md, "What was run"). Usage: examples/verl_prover/run.sh [more overrides]
#
# data: parquet files in verl's RL format whose rows carry extra_info.seed (the FrozenLake episode) and a
# prompt column (unused by the spec's prompt, required by verl's dataset); make_data.py writes them, once.
set -euo pipefail
DATA="${DATA:-$HOME/data/frozenlake}"
[ -f "$DATA/train.parquet" ] || python3 "$(dirname "$0")/make_data.py" --out "$DATA"
export VERL_USE_EXTERNAL_MODULES=prover_verl.plugin   # or rely on prover-verl's verl.plugins entry point
export PYTHONPATH="$(cd "$(dirname "$0")" && pwd):${PYTHONPATH:-}"   # frozenlake_spec importable in every worker

python3 -m verl.trainer.main_ppo \
  algorithm.adv_estimator=prover \
  algorithm.norm_adv_by_std_in_grpo=false \
  trainer.use_v1=true \
  trainer.v1.trainer_mode=prover_sync \
  +prover.spec=frozenlake_spec.FrozenLakeSpec \
  actor_rollout_ref.rollout.agent.default_agent_loop=prover_env \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.mode=async \
  actor_rollout_ref.rollout.n=8 \
  actor_rollout_ref.rollout.prompt_length=256 \
  actor_rollout_ref.rollout.response_length=1024 \
  actor_rollout_ref.rollout.temperature=1.0 \
  actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
  actor_rollout_ref.actor.ppo_mini_batch_size=16 \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
  data.train_files="$DATA/train.parquet" \
  data.val_files="$DATA/test.parquet" \
  data.train_batch_size=16 \
  trainer.n_gpus_per_node=8 \
  trainer.nnodes=1 \
  trainer.total_epochs=1 \
  trainer.logger='["console","wandb"]' \
  trainer.project_name=prover \
  trainer.experiment_name=frozenlake_prover \
  "$@"
