"""The size of GRPO's gradient at the LLM-shaped benchmark's BC start: what the SGD size's lr grid rests on.

    python benchmarks/llm_grad_norm.py [--seed 0] [--steps 3]

For the first ``--steps`` training batches of ``--seed`` (4 tasks x 8, the ``--size sgd`` batches), the norm of
the token-mean GRPO loss gradient at the BC start, next to the norm of Adam's first step at lr 1e-4 and 1e-3
(``lr x sqrt(parameters)``). docs/benchmarks.md ("The SGD size") quotes its output.
"""

from __future__ import annotations

import argparse

import numpy as np

from prover_bench.llm.credit import grpo_turns
from prover_bench.llm.engine import Engine, episodes, run, threads
from prover_bench.llm.loss import policy_loss
from prover_bench.llm.tasks import Record, make_task
from prover_bench.llm.train import behaviour_clone, step_tasks, token_logp, token_rows, turn_advantages_to_tokens


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    threads()
    params = behaviour_clone(args.seed, steps=200)
    size = sum(v.numel() for v in params.values())
    engine = Engine(params, slots=64)
    for step in range(1, args.steps + 1):
        tasks = [make_task(t) for t in step_tasks(args.seed, step, 4) for _ in range(8)]
        records: list[Record] = run(episodes(engine, tasks, [[args.seed, 1000 + step, i] for i in range(32)]))
        tokens, mask = token_rows(records)
        groups = [records[g * 8 : (g + 1) * 8] for g in range(4)]
        adv = turn_advantages_to_tokens(records, grpo_turns(groups), tokens.shape[1])
        grads = torch.autograd.grad(policy_loss(token_logp(params, tokens), adv, mask, "token-mean"),
                                    list(params.values()))  # fmt: skip
        norm = float(torch.sqrt(sum((g**2).sum() for g in grads)))
        print(f"batch {step}: gradient norm {norm:.3f} (batch success {np.mean([r.success for r in records]):.2f})")
    print(f"{size} parameters; Adam's first step moves the weights by lr x sqrt(parameters): "
          f"{1e-4 * size**0.5:.3f} at lr 1e-4, {1e-3 * size**0.5:.3f} at lr 1e-3")  # fmt: skip


if __name__ == "__main__":
    main()
