"""Does the LLM-shaped benchmark's regime learn at all with more steps? GRPO against GRPO with more members.

    python benchmarks/llm_steps_probe.py [--steps 80] [--seeds 8] [--workers 2] [--out /tmp/llm-steps]

The LLM-shaped benchmark (``prover bench --only llm``) checks first whether more samples per step help at equal
optimizer steps; at 10-20 steps they never did, under Adam or SGD. This probe asks the same question with more
steps, at the largest lr of each optimizer at which no arm's held-out success collapsed in those runs (Adam
3e-4, SGD 1.0): GRPO with G = 8 and G = 12 members per group, the same seeds, BC starts, tasks and evaluation
episodes as the benchmark (``prover_bench.llm``). Prints held-out success at each evaluation step (mean
and 95% CI over seeds) and the paired difference G = 12 minus G = 8. Design: docs/benchmarks.md, "Steps probe".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from prover_bench.llm.engine import threads
from prover_bench.llm.report import format_ci, format_pm
from prover_bench.llm.train import Arm, LLMRun, behaviour_clone, evaluate, train_run
from prover_bench.neural_report import paired_difference
from prover_bench.progress import mean_ci
from prover_bench.tables import markdown_table

SETTINGS = (("adam", 3e-4), ("sgd", 1.0))
GROUPS = (8, 12)
EVAL_TASKS, EVAL_SAMPLES, TASKS_PER_STEP = 64, 2, 4


def start(seed: int) -> tuple[Any, float]:
    threads()
    params = behaviour_clone(seed, steps=200)
    return params, evaluate(params, EVAL_TASKS, EVAL_SAMPLES, seed)


def job(optimizer: str, lr: float, group: int, seed: int, params: Any, success: float, steps: int) -> LLMRun:
    threads()
    arm = Arm(f"GRPO G={group}, {optimizer}", group_size=group, optimizer=optimizer)
    at = tuple(range(steps // 4, steps + 1, steps // 4))
    return train_run(arm, params, seed, lr, steps, at, EVAL_TASKS, EVAL_SAMPLES, success, TASKS_PER_STEP)


def report(runs: dict[tuple[str, float, int], list[LLMRun]], starts: list[float], minutes: float) -> str:
    lines = [
        f"Start (BC, held-out success per seed): {', '.join(f'{s:.3f}' for s in starts)} "
        f"(mean {np.mean(starts):.3f}). Wall time {minutes:.1f} min.",
        "",
    ]
    for optimizer, lr in SETTINGS:
        small, large = (runs[(optimizer, lr, g)] for g in GROUPS)
        steps = small[0].eval_steps
        header = ["step", *(f"G={g}" for g in GROUPS), "G=12 minus G=8, paired"]
        body = []
        for i, step in enumerate(steps):
            x = [r.success[i] for r in large]
            y = [r.success[i] for r in small]
            d = paired_difference(x, y)
            body.append([str(step), format_ci(mean_ci(y)), format_ci(mean_ci(x)), format_pm(d)])
        lines += [f"**{optimizer}, lr {lr:g}** (held-out success, mean ± 95% CI over seeds):", "",
                  markdown_table(header, body), ""]  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="/tmp/llm-steps")
    args = parser.parse_args()
    t0 = time.perf_counter()
    seeds = list(range(args.seeds))
    jobs = [(o, lr, g, s) for o, lr in SETTINGS for g in GROUPS for s in seeds]
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        starts = list(pool.map(start, seeds))
        done = pool.map(job, *zip(*jobs, strict=True), [starts[s][0] for *_, s in jobs],
                        [starts[s][1] for *_, s in jobs], [args.steps] * len(jobs))  # fmt: skip
        runs: dict[tuple[str, float, int], list[LLMRun]] = {}
        for (o, lr, g, s), r in zip(jobs, done, strict=True):
            runs.setdefault((o, lr, g), []).append(r)
            print(f"{o} lr {lr:g} G={g} seed {s}: {', '.join(f'{x:.3f}' for x in r.success)} ({r.seconds:.0f} s)",
                  flush=True)  # fmt: skip
    text = report(runs, [s[1] for s in starts], (time.perf_counter() - t0) / 60)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "steps.md").write_text(text + "\n")
    (out / "results.json").write_text(json.dumps([dataclasses.asdict(r) for rs in runs.values() for r in rs], indent=1))
    print(text)


if __name__ == "__main__":
    main()
