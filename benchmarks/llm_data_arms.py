"""Issue 22's last two LLM-shaped arms on the SGD size: continuations as training data, and negative credit.

    python benchmarks/llm_data_arms.py [--base /tmp/llm-sgd/results.json] [--workers 2] [--out /tmp/llm-data]

Runs ``ProVer, anchor judge, continuations as data`` and ``ProVer, anchor judge, negative credit`` at every lr
of a finished ``prover bench --only llm --size sgd`` run (its grid after widening), with its seeds, BC starts,
tasks and evaluation episodes, and reports them next to that run's arms (read from its ``results.json``) with
the benchmark's own report. Pairing is checked first: every seed's BC start must give the saved held-out
success, and GRPO at seed 0 and the lowest lr must reproduce the saved run exactly; otherwise the script stops.
Design: docs/benchmarks.md, "Continuations as data and negative credit".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from prover_bench.llm import report
from prover_bench.llm.run import DATA, NEGATIVE, Job, Runs, Settings, _run_job, bc_starts, train_jobs
from prover_bench.llm.train import LLMRun, StepLog


def load(path: Path) -> tuple[Settings, dict[int, float], Runs]:
    """A saved run's settings (with the two new arms switched on), BC start success per seed, and runs."""
    saved = json.loads(path.read_text())
    fields = {f.name for f in dataclasses.fields(Settings)}
    s = {k: tuple(v) if isinstance(v, list) else v for k, v in saved["settings"].items() if k in fields}
    runs: Runs = {}
    for r in saved["runs"]:
        run = LLMRun(**(r | {"logs": [StepLog(**x) for x in r["logs"]]}))
        runs.setdefault(run.arm, {}).setdefault(run.lr, []).append(run)
    return Settings(**s | {"more": True}), {int(k): v for k, v in saved["start_success"].items()}, runs


def plain(run: LLMRun) -> tuple[list[float], list[int], list[int]]:
    return run.success, run.env_steps, run.policy_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base", default="/tmp/llm-sgd/results.json")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="/tmp/llm-data")
    args = parser.parse_args()
    t0 = time.perf_counter()
    settings, saved_start, runs = load(Path(args.base))
    seeds = sorted(saved_start)
    lrs = sorted(runs[report.BASE])
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        starts, start_success = bc_starts(settings, pool, seeds)
        moved = {s: (start_success[s], saved_start[s]) for s in seeds if start_success[s] != saved_start[s]}
        if moved:
            sys.exit(f"BC starts differ from the saved run's (seed: (now, saved)): {moved}; not paired, stopping")
        check = Job(report.BASE, 8, seeds[0], lrs[0])
        again = _run_job(settings, check, starts[seeds[0]], start_success[seeds[0]])
        saved = next(r for r in runs[report.BASE][lrs[0]] if r.seed == seeds[0])
        if plain(again) != plain(saved):
            sys.exit(f"GRPO seed {seeds[0]} lr {lrs[0]:g} does not reproduce the saved run: {plain(again)} != "
                     f"{plain(saved)}; not paired, stopping")  # fmt: skip
        print(f"paired: BC starts and GRPO seed {seeds[0]} lr {lrs[0]:g} reproduce the saved run", flush=True)
        jobs = [Job(arm, 8, s, lr) for lr in lrs for arm in (DATA, NEGATIVE) for s in seeds]
        train_jobs(settings, pool, jobs, starts, saved_start, runs)
    minutes = (time.perf_counter() - t0) / 60
    title = "sgd size with continuations as data and negative credit: `python benchmarks/llm_data_arms.py`"
    text = report.markdown(runs, title, [saved_start[s] for s in seeds], minutes)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "llm.md").write_text(text + "\n")
    dump = [dataclasses.asdict(r) for name in (DATA, NEGATIVE) for rs in runs[name].values() for r in rs]
    (out / "results.json").write_text(json.dumps(dump, indent=1))
    print(text)


if __name__ == "__main__":
    main()
