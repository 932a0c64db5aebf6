"""What a collapsed policy does in the LLM-shaped benchmark: the held-out mix of actions before and after RL.

    python benchmarks/llm_collapse.py [--seeds 0 2] [--lrs 1 3] [--steps 20]

GRPO with plain SGD (the ``--size sgd`` settings: 4 tasks x 8 per step), from the benchmark's BC start of
each seed. For the start and each lr: held-out success and mean turns over 64 held-out tasks x 1 episode, and
the share of each action (``go``, ``take``, ``skip``, ``open``, ``wait``, ``invalid``: a token sequence that
names no action) among all turns. docs/benchmarks.md ("Why nothing learns") quotes its output.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import numpy as np

from prover_bench.llm.engine import Engine, episodes, run, threads
from prover_bench.llm.tasks import Record, make_task
from prover_bench.llm.train import HELD_OUT, Arm, behaviour_clone, train_run


def action_mix(params: Any, seed: int, tasks: int = 64) -> str:
    ts = [make_task(HELD_OUT + j) for j in range(tasks)]
    recs: list[Record] = run(episodes(Engine(params, slots=tasks), ts, [[seed, 99_999, i] for i in range(tasks)]))
    verbs = Counter(a[0] for r in recs for a in r.actions)
    n = sum(verbs.values())
    shares = ", ".join(f"{v} {c / n:.2f}" for v, c in verbs.most_common())
    return f"success {np.mean([r.success for r in recs]):.3f}, {np.mean([r.turns for r in recs]):.1f} turns; {shares}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--lrs", type=float, nargs="+", default=[1.0, 3.0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    threads()
    for seed in args.seeds:
        start = behaviour_clone(seed, steps=200)
        print(f"seed {seed}, BC start: {action_mix(start, seed)}", flush=True)
        for lr in args.lrs:
            final: list[Any] = []
            r = train_run(Arm("GRPO", optimizer="sgd"), start, seed, lr, args.steps, (), 64, 1, 0.0, 4, final.append)
            train = ", ".join(f"{x.train_success:.2f}" for x in r.logs[:: max(1, args.steps // 5)])
            print(f"  lr {lr:g}, {args.steps} steps: {action_mix(final[0], seed)} (training-batch success every "
                  f"{max(1, args.steps // 5)} steps: {train})", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
