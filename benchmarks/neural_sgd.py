"""The neural miniature with plain SGD at a fixed lr: any judge "gains", because the bonus enlarges the step.

    python benchmarks/neural_sgd.py [--lr 0.1] [--seeds 6]

The same tasks, rollouts and ProVer as ``prover bench --only neural`` (``benchmarks/prover_bench/neural.py``),
but ``W += lr * g`` instead of Adam, and one lr for every method. Prints each judge's paired relative
gain in held-out success over GRPO after 100 steps (95% CI over seeds).
"""

from __future__ import annotations

import argparse

import numpy as np

from prover_bench import family as F
from prover_bench import neural as N
from prover_bench.neural_report import paired_ratio


def run_sgd(method: N.Method, seed: int, lr: float, train: F.Family, test: F.Family, steps: int = 100) -> float:
    """Held-out success after ``steps`` plain-SGD steps (16 tasks x 8 members per step)."""
    w, task_rng, g_size = F.initial_weights(), np.random.default_rng([seed, 0]), 8
    for step in range(steps):
        sub = train.subset(task_rng.choice(train.n, 16, replace=False))
        pi = F.policy(sub, w)
        n = 16 * g_size
        zero = np.zeros(n, dtype=np.int64)
        ro = F.rollout(sub, pi, np.repeat(np.arange(16), g_size), zero, zero, N._seeds(seed, step, 0, n))
        reward = ro.success.astype(np.float64).reshape(16, g_size)
        mask = ro.states >= 0
        per_turn = np.where(mask, (reward - reward.mean(axis=1, keepdims=True)).reshape(-1)[:, None], 0.0)
        if method.judge is not None:
            N._prover(method, sub, pi, ro, per_turn, N.StepLog(), seed, step, g_size, 8, 1.0)
        w = w + lr * N._gradient(sub, pi, ro, per_turn, mask) / n
    return float(F.success(test, w).mean())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seeds", type=int, default=6)
    args = parser.parse_args()
    train, test = N.families()
    base = [run_sgd(N.Method("GRPO"), s, args.lr, train, test) for s in range(args.seeds)]
    print(f"GRPO, SGD lr {args.lr}: held-out success {np.mean(base):.3f}")
    for judge in ("rule", "oracle", "random"):
        x = [run_sgd(N.Method(judge, judge), s, args.lr, train, test) for s in range(args.seeds)]  # type: ignore[arg-type]
        mean, hw = paired_ratio(x, base)
        print(f"ProVer, {judge} judge: {np.mean(x):.3f}, vs GRPO {100 * mean:+.1f}% ± {100 * hw:.1f}")


if __name__ == "__main__":
    main()
