#!/usr/bin/env bash
# ProVer credit on OpenRLHF 0.11.2 (PPO trainer, agent mode), continuations on OpenRLHF's own vLLM engines.
# One node, 4 GPUs, everything colocated: actor, reference and 4 vLLM engines share the GPUs; the engines
# sleep between phases and are woken for verification (--vllm.enable_sleep). NOT RUN HERE: it needs GPUs,
# vLLM and flash-attn; the CPU tests run the same code paths on a stand-in vLLM (docs/adapters/openrlhf.md).
#
#   pip install openrlhf==0.11.2 vllm && pip install . ./adapters/openrlhf   # vLLM: the version OpenRLHF pins
#   bash examples/openrlhf_prover.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # examples.openrlhf_keydoor importable in every Ray worker

DATA=${DATA:-/tmp/prover_keydoor.jsonl}
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
python - "$DATA" <<'PY'
import json, sys
rooms = ["kitchen", "cellar", "attic", "library", "garden shed", "boathouse", "chapel", "workshop"]
with open(sys.argv[1], "w") as f:
    for i in range(256):
        room = rooms[i % len(rooms)]
        prompt = (f"You are in the {room}. A key lies on the floor; the door is shut. "
                  "Reply with one action per turn: 'take key', 'open door' or 'look'.\nAction:")
        f.write(json.dumps({"prompt": prompt, "label": ""}) + "\n")
PY

python -m prover_openrlhf.launch \
  --prover.setup examples.openrlhf_keydoor:make_setup \
  --train.agent_func_path examples/openrlhf_keydoor.py \
  --actor.model_name_or_path "$MODEL" \
  --data.prompt_dataset "$DATA" --data.input_key prompt --data.label_key label \
  --data.max_len 1024 --rollout.max_new_tokens 16 \
  --rollout.n_samples_per_prompt 8 --rollout.batch_size 16 --rollout.micro_batch_size 8 \
  --train.batch_size 64 --train.micro_batch_size 4 --train.max_epochs 1 --train.num_episodes 1 \
  --algo.advantage.estimator dr_grpo --algo.kl.init_coef 0 \
  --actor.num_nodes 1 --actor.num_gpus_per_node 4 --ref.num_nodes 1 --ref.num_gpus_per_node 4 \
  --vllm.num_engines 4 --vllm.tensor_parallel_size 1 --vllm.gpu_memory_utilization 0.5 --vllm.enable_sleep \
  --train.colocate_all --ds.enable_sleep --ds.zero_stage 2 \
  --logger.tensorboard_dir "${TB_DIR:-/tmp/prover_keydoor_tb}" \
  --ckpt.path "${CKPT_DIR:-/tmp/prover_keydoor_ckpt}" \
  "$@"
# ProVer's figures are in the training status OpenRLHF logs (TensorBoard / wandb): prover/groups_accepted,
# prover/mean_delta_accepted, prover/engine_calls, prover/engine_generated_tokens, prover/time_s, prover_bonus, ...
