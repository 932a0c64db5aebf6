"""The library's default configuration on the LLM-shaped Adam size, paired with GRPO: a rerun of one arm.

    python benchmarks/llm_default_arm.py [--lrs LR,LR,...] [--size adam] [--workers 2] [--out /tmp/llm-default]

Runs GRPO and ``ProVer, library default`` (the default judge, K = 4) with the Adam size's settings
(``prover bench --only llm --size adam``: 8 seeds, 20 Adam steps, the same BC starts, tasks and evaluation
episodes) at the lrs that run ended with after widening its grid, and prints the benchmark's own report for
the two arms. For when the default judge changes: the other arms do not use it, so their figures stand.
``--size quick`` runs the quick size instead (a smoke test of the script, minutes).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from prover_bench.llm import report
from prover_bench.llm.run import ADAM, DEFAULT, QUICK, Job, Runs, bc_starts, threads, train_jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--lrs", default=f"{1e-4 / 3!r},1e-4,3e-4")  # the Adam size widened 1e-4 / 3
    parser.add_argument("--size", choices=("adam", "quick"), default="adam")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="/tmp/llm-default")
    args = parser.parse_args()
    settings = ADAM if args.size == "adam" else dataclasses.replace(QUICK, more=True)
    lrs = [float(x) for x in args.lrs.split(",")] if args.size == "adam" else list(QUICK.lrs)
    threads()
    t0 = time.perf_counter()
    runs: Runs = {}
    seeds = range(settings.seeds)
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        starts, success = bc_starts(settings, pool, seeds)
        jobs = [Job(arm, 8, seed, lr) for lr in lrs for arm in (report.BASE, DEFAULT) for seed in seeds]
        train_jobs(settings, pool, jobs, starts, success, runs)
    minutes = (time.perf_counter() - t0) / 60
    title = f"{settings.title} size, GRPO and the library default: `python benchmarks/llm_default_arm.py`"
    text = report.markdown(runs, title, [success[s] for s in seeds], minutes)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "llm.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
